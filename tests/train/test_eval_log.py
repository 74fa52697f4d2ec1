"""When a run evaluates: every eval_every steps, else at each epoch's end, once more at the end, and on resuming a
run stopped during a step's evaluation."""

import pytest

from gaccum_core.train.checkpoint_state import Counters
from gaccum_core.train.eval_log import evaluation_due


@pytest.mark.parametrize("moment, eval_every, step, last_eval_step, due", [
    ("step", 3, 6, 3, True), ("step", 3, 7, 6, False), ("step", 0, 6, 3, False),
    ("epoch", 0, 6, 3, True), ("epoch", 0, 6, 6, False), ("epoch", 3, 7, 6, False),
    ("end", 3, 7, 6, True), ("end", 0, 7, 7, False), ("end", 0, 0, -1, True),
    ("resumed", 3, 6, 3, True),    # stopped during step 6's evaluation: redo it
    ("resumed", 3, 6, 6, False),   # evaluated before the stop
    ("resumed", 3, 7, 6, False),   # step 7 is not an evaluation step
    ("resumed", 3, 0, -1, False),  # nothing trained yet
    ("resumed", 0, 6, 3, False),   # per-epoch evaluation resumes from the window loop
])
def test_an_evaluation_is_due_at_these_moments(moment, eval_every, step, last_eval_step, due):
    counters = Counters(step=step, last_eval_step=last_eval_step)
    assert evaluation_due(moment, eval_every, counters) is due

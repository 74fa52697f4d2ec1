"""Issue 33 item 9: runs of different lengths are judged over the steps they share (a run stopped at step 141
beside the same 360-step run coincides over its first 141 steps), and the pages say how many."""

import numpy as np
import pandas as pd

from gaccum_core.views.coinciding import coinciding
from gaccum_core.views.series import RunSeries


def run(run_id: str, loss) -> RunSeries:
    loss = np.asarray(loss, dtype=float)
    return RunSeries(run_id, run_id, pd.DataFrame({"step": np.arange(1, len(loss) + 1), "loss": loss}),
                     pd.DataFrame())


LOSS = 2.3 * np.exp(-np.arange(360) / 90) + 0.05 * np.sin(np.arange(360))


def test_a_run_stopped_early_coincides_with_the_whole_run_over_its_own_steps():
    whole, stopped = run("whole", LOSS), run("stopped", LOSS[:141] * (1 + 1e-7))
    (group,) = coinciding([whole, stopped])
    assert group.run_ids == ("whole", "stopped") and group.steps == 141 and not group.whole
    assert 0 < group.max_diff < 1e-6
    assert group.sentence().startswith("whole and stopped coincide over their first 141 steps: their losses differ "
                                       "by at most 1.0e-07 (relative)")
    (same,) = coinciding([whole, run("again", LOSS)])
    assert same.whole and "coincide over all 360 steps" in same.sentence()


def test_runs_that_part_within_their_common_steps_do_not_coincide():
    parted = LOSS[:141].copy()
    parted[100:] += 0.1  # the same up to step 100, not after
    assert coinciding([run("whole", LOSS), run("parted", parted)]) == []
    assert coinciding([run("whole", LOSS), run("one step", LOSS[:1])]) == []  # one step shared: nothing to judge

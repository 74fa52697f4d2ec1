"""What the Sweeps page reads off a summary, computed here: whether any run is done, the loss curves' x
axis (tokens on text, samples otherwise) and a cell's runs with their final losses."""

import math

import numpy as np
import pandas as pd

from gaccum_core.sweeps.members import Member
from gaccum_core.sweeps.spec import SweepSpec
from gaccum_core.sweeps.summary import RunResult, summary_of
from gaccum_core.train.metrics import EVAL_COLUMNS, STEP_COLUMNS

SPEC = SweepSpec(grid=(("micro_batch_size", (8, 32)),), common=(("model", "mlp"), ("device", "cpu")), repeats=2,
                 effective_batch=64)
STEPS = 4


def result(cell: int, repeat: int, tokens: bool = False) -> RunResult:
    """A done run whose loss falls to 1 + cell + repeat / 10 at its last step."""
    step = np.arange(1, STEPS + 1)
    metrics = pd.DataFrame({c: 0.0 for c in STEP_COLUMNS}, index=range(STEPS)).assign(
        step=step, samples=64, samples_seen=64 * step, loss=1 + cell + repeat / 10 + (STEPS - step),
        tokens_seen=640.0 * step if tokens else np.nan)
    evals = pd.DataFrame([{c: 0.0 for c in EVAL_COLUMNS}])
    return RunResult(cell, repeat, f"run-c{cell}-r{repeat}", metrics, evals)


def summary(results: list[RunResult]):
    members = {(r.cell, r.repeat): Member(r.run_id, "finished") for r in results}
    return summary_of(SPEC, results, members)


def test_a_cells_runs_are_listed_by_repeat_with_their_last_steps_loss():
    done = summary([result(1, 1), result(0, 0), result(1, 0)])
    runs = done.cell_runs(1)
    assert list(runs.columns) == ["repeat", "run_id", "final loss"]
    assert list(runs["repeat"]) == [0, 1] and list(runs["run_id"]) == ["run-c1-r0", "run-c1-r1"]
    assert [round(v, 6) for v in runs["final loss"]] == [2.0, 2.1]
    assert list(done.cell_runs(0)["run_id"]) == ["run-c0-r0"]


def test_a_sweep_without_a_done_run_has_nothing_to_draw():
    empty = summary([])
    assert not empty.any_runs and empty.cell_runs(0).empty
    assert empty.x_axis == "samples_seen"
    one = summary([result(0, 0)])
    assert one.any_runs and list(one.cell_runs(1).columns) == ["repeat", "run_id", "final loss"]  # none yet


def test_the_loss_curves_run_over_tokens_when_the_runs_trained_on_text():
    assert summary([result(0, 0)]).x_axis == "samples_seen"
    on_text = summary([result(0, 0, tokens=True), result(1, 0, tokens=True)])
    assert on_text.x_axis == "tokens_seen"
    assert not math.isnan(on_text.curves["tokens_seen"].iloc[-1])

"""Issue 33 item 9 on the pages: a run stopped early beside the same longer run coincides over its own steps,
and the Runs page says it in the Train page's words."""

import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from gaccum_core.config import RunConfig
from gaccum_core.execution.runner import Runner

ROOT = Path(__file__).resolve().parents[2]
TINY = RunConfig(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2, max_steps=6)


@pytest.fixture(scope="module")
def whole_and_stopped(tmp_path_factory) -> list[Path]:
    """Two runs of the same settings: 6 steps, and one that ends after 3 (max_steps 3, the same first steps)."""
    runs = tmp_path_factory.mktemp("runs")
    runner = Runner(runs, executor="thread")
    ids = [runner.submit(TINY), runner.submit(TINY.replace(max_steps=3))]
    assert [runner.wait(run_id, timeout=120).state for run_id in ids] == ["finished", "finished"]
    return [runs / run_id for run_id in ids]


def _coincide_captions(at: AppTest) -> list[str]:
    assert not at.exception, [e.value for e in at.exception]
    return [c.value for c in at.caption if " coincide " in c.value]


def test_the_train_and_runs_pages_say_they_coincide_over_their_first_steps(whole_and_stopped, runs_dir):
    ids = [shutil.copytree(run_dir, runs_dir / run_dir.name).name for run_dir in whole_and_stopped]
    train = AppTest.from_file(str(ROOT / "app_pages/1_Train.py"), default_timeout=60)
    train.run()
    train.multiselect(key="chart_overlay").set_value(ids).run()
    (said,) = _coincide_captions(train)
    assert " coincide over their first 3 steps: their losses differ by at most 0.0e+00 (relative)" in said, said
    runs = AppTest.from_file(str(ROOT / "app_pages/2_Runs.py"), default_timeout=60)
    runs.run()
    runs.multiselect(key="runs_selected").set_value(ids).run()
    assert _coincide_captions(runs) == [said]

"""Issue 29 D: runs whose status.json holds something other than the object the run store writes ([], null, 7,
"x", {}, a cut-off file) are listed as damaged on Home and Runs, never offered on the Train page, and
break no page: every page draws, the good run beside them included."""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from page_charts import live_figures

from gaccum_core.runs.catalog import run_table
from gaccum_core.runs.integrity import DamagedRun, read_run
from gaccum_core.runs.store import RunStore, StoreError
from gaccum_core.sweeps.files import write_spec
from gaccum_core.sweeps.spec import SweepSpec, run_name

ROOT = Path(__file__).resolve().parents[2]
BAD_STATUS = {"list": "[]", "null": "null", "number": "7", "text": '"x"', "empty": "{}", "cut": '{"run_id": "ab'}
PAGES = ["app.py", "app_pages/1_Train.py", "app_pages/2_Runs.py", "app_pages/3_Equivalence.py",
         "app_pages/4_Pitfalls.py", "app_pages/5_Plan.py", "app_pages/6_Sweeps.py"]


@pytest.fixture
def damaged_runs(finished_run, runs_dir) -> tuple[str, dict[str, str]]:
    """The good run, as a sweep's one run, and beside it a damaged copy per bad status.json (sweep runs by
    their ids, so the Sweeps page reads them too): (good id, {case: damaged id})."""
    config = RunStore(finished_run.parent).read_config(finished_run.name)
    spec = SweepSpec(grid=(("lr", (config.lr,)),), common=tuple(dataclasses.asdict(config).items()))
    write_spec(runs_dir, spec)
    good = f"{finished_run.name}-{spec.sweep_id}"
    shutil.copytree(finished_run, runs_dir / good)
    status = json.loads((runs_dir / good / "status.json").read_text())
    (runs_dir / good / "status.json").write_text(json.dumps({**status, "name": run_name(spec.sweep_id, 0, 0)}))
    damaged = {}
    for case, text in BAD_STATUS.items():
        damaged[case] = f"{finished_run.name}-{spec.sweep_id}-{case}"
        shutil.copytree(finished_run, runs_dir / damaged[case])
        (runs_dir / damaged[case] / "status.json").write_text(text)
    return good, damaged


@pytest.mark.parametrize("case, kind", [("list", "list"), ("null", "null"), ("number", "int"), ("text", "str")])
def test_reading_a_status_that_is_not_an_object_is_a_store_error_naming_the_file(finished_run, tmp_path, case,
                                                                                 kind):
    shutil.copytree(finished_run, tmp_path / "r")
    (tmp_path / "r" / "status.json").write_text(BAD_STATUS[case])
    message = f"^status\\.json of run r holds a JSON {kind}, not an object$"
    with pytest.raises(StoreError, match=message):
        RunStore(tmp_path).read_status("r")
    with pytest.raises(DamagedRun, match=message):  # the listing's and resume's words, said once
        read_run(RunStore(tmp_path), "r")


def test_every_page_draws_beside_runs_with_a_bad_status_and_lists_them_as_damaged(damaged_runs, runs_dir):
    good, damaged = damaged_runs
    table = run_table(RunStore(runs_dir)).set_index("run_id")
    assert table.loc[good, "state"] == "finished"
    assert (table.loc[list(damaged.values()), "state"] == "damaged").all(), table["state"]
    for page in PAGES:
        at = AppTest.from_file(str(ROOT / page), default_timeout=60).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        if page in ("app.py", "app_pages/2_Runs.py"):
            listed = at.dataframe[0].value.set_index("run_id")["state"]
            assert listed[good] == "finished" and (listed[list(damaged.values())] == "damaged").all(), page
        if page == "app_pages/1_Train.py":  # the good run can be overlaid; the damaged ones are not offered
            overlay = at.multiselect(key="chart_overlay")
            assert len(overlay.options) == 1, overlay.options
            overlay.set_value([good]).run()
            assert not at.exception, [e.value for e in at.exception]
            loss = live_figures(at)["loss"]
            assert [trace["name"] for trace in loss["data"]], "the good run's loss is drawn"
        if page == "app_pages/2_Runs.py":  # selecting them all draws the good run and says why the others are not
            at.multiselect(key="runs_selected").set_value([good, *damaged.values()]).run()
            assert not at.exception, [e.value for e in at.exception]
            assert at.get("plotly_chart")
            assert len([w for w in at.warning if w.value.startswith("Damaged:")]) == len(damaged)
        if page == "app_pages/6_Sweeps.py":  # the sweep's good run is counted, its damaged ones left out
            assert at.dataframe[0].value["runs"].tolist() == ["1/1"]  # runs done of the cell's repeats

"""TensorBoard in, on the pages: the Runs page's Import box imports a folder of event files, lists and selects the
run, overlays it beside a gaccum run on every x axis, and offers no Resume for it (it says why); the Train page
overlays it too; a folder with nothing to import is refused in one line."""

import base64
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from dashboard.markdown import plain
from gaccum_core.tensorboard.importing import NOT_RESUMABLE
from gaccum_core.views.axes import X_AXES
from page_charts import live_figures
from tb_writers import lightning_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def elsewhere(tmp_path_factory) -> Path:
    """A folder for the event files, outside the runs directory (the runs_dir fixture is tmp_path)."""
    return tmp_path_factory.mktemp("tensorboard")


def _page(name: str) -> AppTest:
    return AppTest.from_file(str(ROOT / "app_pages" / name), default_timeout=60).run()


def _import(at: AppTest, folder: Path) -> AppTest:
    at.text_input(key="import_folder").input(str(folder))
    return at.button(key="import_runs").click().run()


def _points(values) -> int:
    """How many values a trace's x holds: a list, or plotly's typed array ({"dtype", "bdata"})."""
    if isinstance(values, dict):
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).size
    return len(values)


def _traces(at: AppTest, chart: str) -> list[dict]:
    (element,) = [c for c in at.get("plotly_chart") if c.key == f"runs_chart_{chart}"]
    return [trace for trace in json.loads(element.proto.spec)["data"] if trace.get("x") is not None]


def test_the_runs_page_imports_a_folder_and_overlays_it_beside_a_gaccum_run(finished_run, runs_dir, elsewhere):
    shutil.copytree(finished_run, runs_dir / finished_run.name)
    at = _page("2_Runs.py")
    at = _import(at, lightning_run(elsewhere / "version_0"))
    assert not at.exception, [e.value for e in at.exception]
    (imported,) = [r for r in at.dataframe(key="runs_table").value["run_id"] if r != finished_run.name]
    (said,) = [s.value for s in at.success]
    assert said.startswith("Imported 1 run, now selected:") and "12 steps" in said, said
    row = at.dataframe(key="runs_table").value.set_index("run_id").loc[imported]
    assert row["state"] == "imported" and row["label"] == "b=8 k=4 fp16"
    assert at.multiselect(key="runs_selected").value == [imported]
    at.multiselect(key="runs_selected").set_value([finished_run.name, imported]).run()
    assert not at.exception, [e.value for e in at.exception]
    losses = _traces(at, "loss")
    assert {t["legendgroup"] for t in losses} == {finished_run.name, imported}
    assert [_points(t["x"]) for t in losses if t["legendgroup"] == imported and "raw" not in t["name"]] == [12]
    # Named by the settings its hparams gave, never by gaccum's defaults in its config (no "mlp", no "epochs=1")
    assert {t["name"] for t in losses if t["legendgroup"] == imported} >= {"imported b=8 k=4 fp16 · version_0"}, \
        {t["name"] for t in losses}
    settings = at.dataframe[1].value
    assert settings.loc["model", imported] == "" and settings.loc["accum_steps", imported] == "4"
    for x_axis in X_AXES:  # columns an imported run lacks (samples, tokens) break no chart
        at.radio(key="runs_x").set_value(x_axis).run()
        assert not at.exception, (x_axis, [e.value for e in at.exception])
    assert not [b for b in at.button if b.key == f"resume_{imported}"]
    assert plain(f"{imported} {NOT_RESUMABLE}.") in [c.value for c in at.caption]


def test_the_import_box_refuses_a_folder_without_event_files_in_one_line(runs_dir, elsewhere):
    (elsewhere / "nothing").mkdir()
    at = _page("2_Runs.py")  # no runs yet: the box is there all the same
    at = _import(at, elsewhere / "nothing")
    assert not at.exception, [e.value for e in at.exception]
    (error,) = [e.value for e in at.error]
    assert error.startswith("Cannot import: ") and "holds no TensorBoard event files" in error
    assert "\n" not in error and not list(runs_dir.iterdir())


def test_the_train_page_overlays_an_imported_run(runs_dir, elsewhere):
    at = _page("2_Runs.py")
    _import(at, lightning_run(elsewhere / "version_0"))
    (imported,) = [p.name for p in runs_dir.iterdir() if not p.name.startswith(".")]
    train = _page("1_Train.py")
    train.multiselect(key="chart_overlay").set_value([imported]).run()
    assert not train.exception, [e.value for e in train.exception]
    loss = live_figures(train)["loss"]
    assert [_points(t["x"]) for t in loss["data"] if t.get("name") == "imported b=8 k=4 fp16 · version_0"] == [12]
    assert not [p for p in train.get("progress")]  # an imported run has no progress to show

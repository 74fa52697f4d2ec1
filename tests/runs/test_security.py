"""Security: loopback by default, XSRF on, run ids checked wherever a path is built, no pickles run."""

import re
import tomllib
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from gaccum_core.views.charts import CHARTS
from gaccum_core.config import RunConfig
from gaccum_core.execution.runner import Runner
from gaccum_core.runs.store import RunStore, StoreError

ROOT = Path(__file__).resolve().parents[2]
BAD_IDS = ["../x", "..", "/etc/passwd", "a/b", "x/../../y", "~root", ".hidden"]


def test_server_binds_to_loopback_with_xsrf_protection_and_no_telemetry():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "127.0.0.1"
    assert config["server"]["enableXsrfProtection"] is True
    assert config["server"]["headless"] is True and config["server"]["fileWatcherType"] == "none"
    assert config["browser"]["gatherUsageStats"] is False
    # No gc.collect() after every (fragment) rerun: it holds the GIL ~0.15 s and starves training.
    assert config["runner"]["postScriptGC"] is False
    assert "base" not in config.get("theme", {})  # the theme follows the browser's light or dark setting
    readme = (ROOT / "docs" / "dashboard.md").read_text()
    assert "ssh -N -L 8501:127.0.0.1:8501" in readme and "--server.address 0.0.0.0" in readme


@pytest.mark.parametrize("bad", BAD_IDS)
def test_every_path_from_a_run_id_is_checked(tmp_path, bad):
    store = RunStore(tmp_path / "runs")
    victim = tmp_path / "victim"
    victim.mkdir()
    for action in (store.path, store.delete, store.read_status, store.read_metrics, store.read_config,
                   store.load_model, lambda r: store.update_status(r, state="x")):
        with pytest.raises(StoreError):
            action(bad)
    assert victim.exists()


@pytest.mark.parametrize("bad", ["../../etc", "/etc/passwd", "a/b"])
def test_a_run_id_in_the_url_is_refused_on_the_runs_page(runs_dir, bad):
    runner = Runner(runs_dir)
    runner.wait(runner.submit(RunConfig(device="cpu", model="mlp", max_steps=1)), timeout=60)
    at = AppTest.from_file(str(ROOT / "app_pages/2_Runs.py"), default_timeout=60)
    at.query_params["run"] = bad
    at.run()
    assert not at.exception
    assert "is not allowed" in at.error[0].value
    assert not at.get("plotly_chart")


def test_a_valid_run_id_in_the_url_opens_that_run(runs_dir):
    from dashboard import server

    run_id = server.get_runner().submit(RunConfig(device="cpu", model="mlp", max_steps=2))
    server.get_runner().wait(run_id, timeout=60)
    at = AppTest.from_file(str(ROOT / "app_pages/2_Runs.py"), default_timeout=60)
    at.query_params["run"] = run_id
    at.run()
    assert at.multiselect(key="runs_selected").value == [run_id]
    # A one-process fp32 run without cache clearing: no loss scale, skipped steps, clearing time or collectives to
    # draw, a line each instead
    drawn = {chart.key.removeprefix("runs_chart_") for chart in at.get("plotly_chart")}
    assert drawn == set(CHARTS) - {"scale", "skipped", "cache", "collectives"}
    assert sum("not applicable" in c.value for c in at.caption) == 4, [c.value for c in at.caption]


class NotWeights:
    """An object a malicious model.pt could carry: loading it would run code."""

    def __reduce__(self):
        return (print, ("pickle code ran",))


def test_model_files_load_with_weights_only(tmp_path):
    store = RunStore(tmp_path)
    run_id = store.create(RunConfig())
    torch.save({"w": NotWeights()}, store.path(run_id) / "model.pt")
    with pytest.raises(Exception, match="[Ww]eights only load failed"):
        store.load_model(run_id)


def test_nothing_the_user_types_is_executed_or_imported():
    sources = [*ROOT.glob("gaccum_core/**/*.py"), *ROOT.glob("app_pages/*.py"), ROOT / "app.py",
               *ROOT.glob("dashboard/*.py")]
    assert len(sources) > 40  # every package's modules, not only the top level
    for path in sources:
        text = path.read_text()
        if path == ROOT / "gaccum_core" / "execution" / "aside.py":
            # The one unpickling, counted: what a worker process of this server's sends back (it runs only code
            # from the folder GACCUM_USER_CODE allows, as the server's own user), and the call it is sent.
            for call in ("pickle.loads(source.read(", "pickle.load(sys.stdin.buffer)", "pickle.loads(pickle.dumps(exc))"):
                assert text.count(call) == 1, call
                text = text.replace(call, "")
        assert not re.search(r"(?<![.\w])(eval|exec|__import__|import_module)\(", text), path  # not .eval()
        assert "pickle.load" not in text and "weights_only=False" not in text, path

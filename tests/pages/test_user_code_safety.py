"""No code of yours runs in the dashboard's server, from a link or as you type (issue 29 A).

Each file named here writes a marker with the pid of the process that imported it (and another when its
function is called). The pages must leave no marker in this process: they only read the file's syntax tree.
A run started from the Train page imports it in its worker process, only when GACCUM_USER_CODE names its
folder. The command line keeps importing MODULE:FUNCTION as named.
"""

import json
import os
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from gaccum_core import usercode
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.states import RunState
from workers import close_now, wait_warm

ROOT = Path(__file__).resolve().parents[2]
OWN = "your own…"
MARKED = '''
import os
from pathlib import Path

import torch
from torch import nn

Path(__file__).with_suffix(".imported").write_text(str(os.getpid()))


def build(input_shape, num_classes):
    Path(__file__).with_suffix(".called").write_text(str(os.getpid()))
    channels, height, width = input_shape
    return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, num_classes))


def load():
    Path(__file__).with_suffix(".called").write_text(str(os.getpid()))
    generator = torch.Generator().manual_seed(0)
    items = [(torch.rand(1, 4, 4, generator=generator), i % 3) for i in range(30)]
    return items[:24], items[24:]
'''

RAISING = '''
import os
from pathlib import Path


def build(input_shape, num_classes):
    Path(__file__).with_suffix(".called").write_text(str(os.getpid()))
    raise ValueError("no such layer")
'''

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def code(tmp_path_factory) -> Path:
    """A folder holding mine.py (a factory build and a data set load that leave markers) and a package; a file
    outside.py beside it (outside the folder)."""
    folder = tmp_path_factory.mktemp("src") / "code"
    (folder / "pkg").mkdir(parents=True)
    (folder / "mine.py").write_text(MARKED, encoding="utf-8")
    (folder / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (folder / "pkg" / "data.py").write_text(MARKED, encoding="utf-8")
    (folder.parent / "outside.py").write_text(MARKED, encoding="utf-8")
    return folder


def markers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.parent.rglob("*") if p.suffix in (".imported", ".called"))


def page(path: str, link: dict | None = None) -> AppTest:
    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / path), default_timeout=120)
    if link:
        at.query_params = link
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def errors(at: AppTest) -> list[str]:
    return [e.value for e in [*at.sidebar.error, *at.main.error]]


# -- the checks themselves: nothing imported ------------------------------------------------------------


def test_a_name_is_refused_in_the_server_unless_gaccum_user_code_names_a_folder(code, monkeypatch):
    import dashboard  # noqa: F401 - imported for its effect: the pages' confinement, as the server has it

    monkeypatch.delenv(usercode.USER_CODE_ENV, raising=False)
    with pytest.raises(ConfigError, match="GACCUM_USER_CODE=DIR"):
        usercode.check_named("model", f"{code}/mine.py:build")
    monkeypatch.setenv(usercode.USER_CODE_ENV, str(code / "missing"))
    with pytest.raises(ConfigError, match="which is not a folder"):
        usercode.check_named("model", f"{code}/mine.py:build")
    assert markers(code) == []


@pytest.mark.parametrize("name,words", [
    ("{outside}/outside.py:build", "is outside it"),
    ("../outside.py:build", "is outside it"),
    ("mine.py:nothing", "a function nothing in mine.py: mine.py defines none"),
    ("missing.py:build", "there is no file"),
    ("os:abort", "there is no os.py or os/__init__.py there"),
    ("sys:exit", "there is no sys.py"),
    ("_thread:interrupt_main", "there is no _thread.py"),
    ("pkg.nothing:load", "there is no pkg/nothing.py"),
    ("broken.py:build", "a Python file gaccum can read: SyntaxError"),
    ("link.py:build", "is outside it"),
], ids=["absolute-outside", "relative-outside", "no-function", "no-file", "os-abort", "sys-exit", "interrupt",
        "no-module", "syntax-error", "symlink-out"])
def test_the_static_check_refuses_what_it_cannot_find_in_the_folder_without_importing(code, monkeypatch, name,
                                                                                        words):
    (code / "broken.py").write_text("def build(:\n", encoding="utf-8")
    (code / "link.py").symlink_to(code.parent / "outside.py")
    monkeypatch.setenv(usercode.USER_CODE_ENV, str(code))
    with pytest.raises(ConfigError) as refused:
        usercode.check_named("model", name.replace("{outside}", str(code.parent)))
    assert words in refused.value.allowed and "\n" not in str(refused.value), refused.value.allowed
    assert markers(code) == []


@pytest.mark.parametrize("name", ["mine.py:build", "{code}/mine.py:load", "mine:build", "pkg.data:load"])
def test_the_static_check_finds_a_file_or_module_of_the_folder_and_its_function_unimported(code, monkeypatch, name):
    monkeypatch.setenv(usercode.USER_CODE_ENV, str(code))
    found = usercode.check_named("dataset", name.replace("{code}", str(code)))
    assert found.parent in (code, code / "pkg") and found.suffix == ".py"
    assert markers(code) == []


def test_the_worker_side_import_is_confined_to_the_folder_too(code, monkeypatch):
    """A process started with GACCUM_USER_CODE (the server's workers) imports names from that folder only."""
    monkeypatch.setenv(usercode.USER_CODE_ENV, str(code))
    with pytest.raises(ConfigError, match="is outside it"):
        usercode.user_function("model", f"{code.parent}/outside.py:build")
    with pytest.raises(ConfigError, match="there is no json.py"):
        usercode.user_function("model", "json:loads")  # Python's own json: never taken for the folder's
    assert markers(code) == []
    assert callable(usercode.user_function("model", "pkg.data:build"))
    assert (code / "pkg" / "data.imported").read_text() == str(os.getpid())


# -- the pages: a link, or a name typed ------------------------------------------------------------------


@pytest.mark.parametrize("allowed", [False, True], ids=["unset", "folder-set"])
def test_a_link_naming_a_file_imports_nothing_in_the_server(runs_dir, code, monkeypatch, allowed):
    if allowed:
        monkeypatch.setenv(usercode.USER_CODE_ENV, str(code))
    else:
        monkeypatch.delenv(usercode.USER_CODE_ENV, raising=False)
    at = page("app_pages/1_Train.py", {"model": f"{code}/mine.py:build", "dataset": f"{code}/mine.py:load"})
    assert markers(code) == []  # neither imported nor called: the server only read the file
    if allowed:
        assert not errors(at) and not at.button(key="start").disabled, errors(at)
        assert any("loaded by the run's worker process on Start" in c.value for c in at.sidebar.caption)
    else:
        assert any("GACCUM_USER_CODE=DIR" in e for e in errors(at)), errors(at)
        assert at.button(key="start").disabled


@pytest.mark.parametrize("typed", ["os:abort", "sys:exit", "_thread:interrupt_main", "{outside}/outside.py:build"])
def test_a_name_typed_is_refused_in_one_line_and_nothing_runs(runs_dir, code, monkeypatch, typed):
    monkeypatch.setenv(usercode.USER_CODE_ENV, str(code))
    at = page("app_pages/1_Train.py")
    at.selectbox(key="cfg_dataset").select(OWN).run()
    at.text_input(key="cfg_own_dataset").input(typed.replace("{outside}", str(code.parent))).run()
    assert not at.exception, [e.value for e in at.exception]
    message = errors(at)[0]
    assert "GACCUM_USER_CODE" in message and "\n" not in message, message
    assert at.button(key="start").disabled and markers(code) == []


@pytest.mark.multiprocess  # a worker process of its own
def test_start_imports_the_code_in_the_runs_worker_process_only(runs_dir, code, monkeypatch):
    monkeypatch.setenv(usercode.USER_CODE_ENV, str(code))
    monkeypatch.setenv("GACCUM_EXECUTOR", "process")
    at = page("app_pages/1_Train.py", {"model": "mine.py:build", "dataset": "mine.py:load", "micro_batch_size": "4",
                                       "accum_steps": "2", "max_steps": "2", "device": "cpu"})
    assert not errors(at) and markers(code) == [], errors(at)
    from dashboard import server

    wait_warm(server.get_runner())  # Start is enabled once the spare worker has imported torch
    at.run()
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    runner = server.get_runner()
    try:
        assert runner.wait(run_id, timeout=150).state == RunState.FINISHED, runner.snapshot(run_id).message
        worker = int((code / "mine.imported").read_text())
        assert worker != os.getpid() and int((code / "mine.called").read_text()) == worker
    finally:
        close_now(runner)  # and the spare warmed after the run


def test_the_thread_executor_refuses_your_code_at_start(runs_dir, code, monkeypatch):
    monkeypatch.setenv(usercode.USER_CODE_ENV, str(code))
    from dashboard import server

    config = RunConfig(model="mine.py:build", dataset="mine.py:load", micro_batch_size=4, max_steps=1)
    with pytest.raises(ConfigError, match="GACCUM_EXECUTOR=thread trains in the dashboard's server"):
        server.get_runner().submit(config)
    assert not list(runs_dir.iterdir()) and markers(code) == []


@pytest.mark.multiprocess  # a worker process of its own
def test_the_equivalence_page_compares_your_code_in_a_worker_process_of_its_own(runs_dir, code, monkeypatch):
    monkeypatch.setenv(usercode.USER_CODE_ENV, str(code))
    at = page("app_pages/3_Equivalence.py")
    at.selectbox(key="eq_model").select(OWN).run()
    at.text_input(key="eq_own_model").input("mine.py:build").run()
    at.number_input(key="eq_steps").set_value(2).run()
    assert not errors(at) and markers(code) == [], errors(at)
    at.button(key="eq_run").click().run()
    assert not at.exception and not errors(at), errors(at)
    assert "equal up to float rounding" in at.success[0].value
    worker = int((code / "mine.imported").read_text())
    assert worker != os.getpid() and int((code / "mine.called").read_text()) == worker
    assert len(at.get("plotly_chart")) == 3


@pytest.mark.multiprocess  # a worker process of its own
def test_the_plan_page_measures_your_code_in_a_worker_process_and_says_what_it_raised(runs_dir, code, monkeypatch):
    monkeypatch.setenv(usercode.USER_CODE_ENV, str(code))
    (code / "raising.py").write_text(RAISING, encoding="utf-8")
    at = page("app.py")
    at.switch_page("app_pages/5_Plan.py").run()
    for key, value in (("plan_model", OWN), ("plan_own_model", "raising.py:build")):
        (at.selectbox if key == "plan_model" else at.text_input)(key=key).set_value(value).run()
    assert not errors(at) and not at.button(key="plan_run").disabled, errors(at)
    at.button(key="plan_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "(failed)" in at.warning[0].value, [w.value for w in at.warning]  # every candidate failed: nothing fits
    cells = [str(cell) for frame in at.dataframe for cell in frame.value.to_numpy().ravel()]
    assert any("it raised ValueError: no such layer" in cell for cell in cells), cells
    assert int((code / "raising.called").read_text()) != os.getpid()  # measured in a worker process


def test_a_resume_from_the_dashboard_of_a_cli_run_outside_the_folder_is_refused(runs_dir, code, monkeypatch):
    """A run the command line trained on a file outside GACCUM_USER_CODE is not resumed by the server."""
    monkeypatch.delenv(usercode.USER_CODE_ENV, raising=False)
    from gaccum_core.execution.runner import Runner
    from gaccum_core.train.checkpoint import CheckpointError

    cli = Runner(str(runs_dir))
    config = RunConfig(model=f"{code.parent}/outside.py:build", dataset="digits", micro_batch_size=8, max_steps=1)
    run_id = cli.submit(config)
    assert cli.wait(run_id, timeout=60).state == RunState.FINISHED
    (code.parent / "outside.imported").unlink()
    (code.parent / "outside.called").unlink()
    monkeypatch.setenv(usercode.USER_CODE_ENV, str(code))
    server = Runner(str(runs_dir), confined=True)
    with pytest.raises(CheckpointError, match="is outside it"):
        server.resume(run_id, max_steps=2)
    assert markers(code) == [] and json.loads((runs_dir / run_id / "status.json").read_text())["state"] == "finished"


# -- hf: directories with custom code, and the command line ----------------------------------------------


def test_an_hf_directory_with_custom_code_is_refused_on_the_cli_and_the_page(runs_dir, tmp_path_factory, capsys):
    from gaccum_core.cli.main import main

    model = tmp_path_factory.mktemp("custom")
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "auto_map": {
        "AutoModelForCausalLM": "modeling_evil.EvilModel"}}), encoding="utf-8")
    (model / "modeling_evil.py").write_text("import os\nos.abort()\n", encoding="utf-8")
    assert main(["run", "--model", f"hf:{model}", "--dataset", "pydoc", "--runs-dir", str(runs_dir)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "auto_map" in line and "trust_remote_code stays off" in line
    assert not list(runs_dir.iterdir())
    at = page("app_pages/1_Train.py", {"model": f"hf:{model}", "dataset": "pydoc"})
    assert any("auto_map" in e for e in errors(at)) and at.button(key="start").disabled, errors(at)


def test_the_command_line_imports_module_function_as_named_and_sys_exit_is_an_error(tmp_path, monkeypatch, capsys):
    """The CLI keeps MODULE:FUNCTION (no GACCUM_USER_CODE needed); a function calling sys.exit is refused, exit 2
    (it exited 0 with no output before)."""
    from gaccum_core.cli.main import main

    monkeypatch.delenv(usercode.USER_CODE_ENV, raising=False)
    for command in (["run", "--runs-dir", str(tmp_path / "runs")], ["check"],
                    ["plan", "--effective-batch", "8"], ["sweep", "--runs-dir", str(tmp_path / "runs")]):
        assert main([*command, "--dataset", "sys:exit", "--device", "cpu"]) == 2, command
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "it raised SystemExit" in line, line
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())

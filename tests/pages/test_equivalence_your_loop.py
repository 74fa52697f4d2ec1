"""The Equivalence page's "Your loop" (issue 44): a file from GACCUM_USER_CODE's folder checked by verify in a worker
process of its own; the verdict, the charts' data, the diagnosis and its fix; refusals in one line under their box; a
cancelled check (the page's run ended while it runs) leaves no process behind."""

import json
import os
import threading
import time
from pathlib import Path

import psutil
import pytest
import streamlit as st
from streamlit.runtime.scriptrunner_utils.script_run_context import SCRIPT_RUN_CONTEXT_ATTR_NAME
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.element_tree import Block

from gaccum_core.lab.mistakes import MISTAKES
from workers import children_running
from page_charts import plotly_values

ROOT = Path(__file__).resolve().parents[2]
CORRECT = '''
import os
from pathlib import Path

import torch
from torch import nn

Path(__file__).with_suffix(".imported").write_text(str(os.getpid()))


def setup():
    generator = torch.Generator().manual_seed(0)
    return nn.Linear(3, 2), {"x": torch.randn(12, 3, generator=generator), "y": torch.randn(12, 2, generator=generator)}


def window(model, micro_batches):
    count = sum(len(m["x"]) for m in micro_batches)
    for micro in micro_batches:
        ((model(micro["x"]) - micro["y"]) ** 2).sum().div(count).backward()
'''
TWICE = CORRECT.replace(".div(count).backward()", ".div(count).div(len(micro_batches)).backward()")
RAISING = CORRECT.replace("    count = sum(", "    raise ValueError('no such layer')\n    count = sum(")
NO_WINDOW = CORRECT[:CORRECT.index("def window")]
SLOW = '''
import os
import time
from pathlib import Path

import torch
from torch import nn


def setup():
    Path(__file__).with_suffix(".pid").write_text(str(os.getpid()))
    return nn.Linear(3, 2), {"x": torch.ones(4, 3), "y": torch.zeros(4, 2)}


def window(model, micro_batches):
    with Path(__file__).with_suffix(".runs").open("a") as runs:
        runs.write("began\\n")
    time.sleep(10)  # a long window: the check runs it 7 times
    with Path(__file__).with_suffix(".runs").open("a") as runs:
        runs.write("ended\\n")
    for micro in micro_batches:
        ((model(micro["x"]) - micro["y"]) ** 2).sum().backward()
'''
OFFERED = ["correct.py", "no_window.py", "raising.py", "slow.py", "twice.py", "sub/nested.py"]  # the folder's first

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def code(tmp_path, runs_dir, monkeypatch) -> Path:
    """The allowed folder with the loops above (one in a subfolder, one in a hidden folder), a file outside it and a
    link inside it to that file."""
    folder = tmp_path / "code"
    (folder / "sub").mkdir(parents=True)
    (folder / ".hidden").mkdir()
    for name, text in {"correct.py": CORRECT, "twice.py": TWICE, "raising.py": RAISING, "no_window.py": NO_WINDOW,
                       "slow.py": SLOW, "sub/nested.py": CORRECT, ".hidden/secret.py": CORRECT}.items():
        (folder / name).write_text(text, encoding="utf-8")
    (tmp_path / "outside.py").write_text(CORRECT, encoding="utf-8")
    (folder / "link.py").symlink_to(tmp_path / "outside.py")
    monkeypatch.setenv("GACCUM_USER_CODE", str(folder))
    return folder


def page() -> AppTest:
    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / "app_pages/3_Equivalence.py"), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def choose(at: AppTest, file: str, splits: str = "") -> AppTest:
    at.selectbox(key="eq_loop_file").select(file).run()
    return at.text_input(key="eq_loop_splits").input(splits).run()


def under(at: AppTest, key: str) -> str | None:
    """The error right under the control with this key, or None."""
    nodes = [node for node in at.main if not isinstance(node, Block)]
    (index,) = [i for i, node in enumerate(nodes) if getattr(node, "key", None) == key]
    following = nodes[index + 1] if index + 1 < len(nodes) else None
    return following.value if following is not None and following.type == "error" else None


def traces(at: AppTest) -> dict[str, dict]:
    """The first trace of each of the section's charts, by key, with its x and y as lists."""
    found = {}
    for chart in at.get("plotly_chart"):
        if chart.proto.id.endswith(("eq_loop_differences", "eq_loop_scales")):
            trace = json.loads(chart.proto.spec)["data"][0]
            found[chart.proto.id.rpartition("-")[2]] = {"x": plotly_values(trace["x"]), "y": plotly_values(trace["y"])}
    return found


def test_only_the_folders_files_are_offered_and_bad_names_or_splits_are_refused_under_their_box(code):
    at = page()
    assert at.selectbox(key="eq_loop_file").options == OFFERED  # not outside.py, its link, nor the hidden folder's
    assert at.selectbox(key="eq_loop_file").value is None and not at.error  # none picked: nothing said yet
    assert at.button(key="eq_loop_run").disabled
    choose(at, "no_window.py")
    message = under(at, "eq_loop_window")
    assert message.startswith("window function = 'window' is not allowed: a function window in") and "\n" not in message
    assert at.button(key="eq_loop_run").disabled
    choose(at, "correct.py", "6,6/6,x")
    assert not (code / "correct.imported").exists()  # the server read its syntax tree only
    message = under(at, "eq_loop_splits")
    assert message.startswith("splits='6,6/6,x' is not allowed: positive integers") and "\n" not in message
    assert at.button(key="eq_loop_run").disabled and not at.exception


def test_without_an_allowed_folder_the_section_says_how_to_allow_one_and_takes_no_file(runs_dir, monkeypatch):
    monkeypatch.delenv("GACCUM_USER_CODE", raising=False)
    at = page()
    assert any("GACCUM_USER_CODE=DIR" in info.value for info in at.info)
    with pytest.raises(KeyError):
        at.selectbox(key="eq_loop_file")


@pytest.mark.multiprocess  # each check in a worker process of its own
def test_a_correct_loop_passes_one_divided_by_k_twice_is_diagnosed_and_one_that_raises_is_said_in_one_line(code):
    at = page()
    choose(at, "correct.py").button(key="eq_loop_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "split-invariant" in at.success[0].value and not at.warning
    assert int((code / "correct.imported").read_text()) != os.getpid()  # imported in the worker process
    charts = traces(at)
    assert set(charts) == {"eq_loop_differences"}  # no mistake, no scale chart
    # the splits the issue names for 12 samples, against the whole batch (not drawn), then a three-way one
    assert charts["eq_loop_differences"]["x"][:4] == ["6,6", "1,11", "11,1", ",".join(["1"] * 12)]
    assert max(charts["eq_loop_differences"]["y"]) < 1e-5

    choose(at, "twice.py").button(key="eq_loop_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.warning[0].value.startswith("twice.py: not split-invariant") and not at.success
    words = [m.value for m in at.markdown]
    assert any(w.startswith("Diagnosis: divided by k once too often (relative residual") for w in words), words
    assert f"Fix: {MISTAKES['divided_by_k_twice'].fix}" in words
    differences, scales = traces(at)["eq_loop_differences"], traces(at)["eq_loop_scales"]
    ks = [split.count(",") + 1 for split in differences["x"]]
    # g/k against g: the relative max-abs difference is 1 − 1/k, the scale 1/k (the first split is the whole batch)
    assert differences["y"] == pytest.approx([1 - 1 / k for k in ks], rel=1e-4)
    assert sorted(scales["x"]) == sorted([1, *ks])
    assert scales["y"] == pytest.approx([1 / k for k in scales["x"]], rel=1e-4)
    assert len(at.get("download_button")) == 2

    choose(at, "raising.py").button(key="eq_loop_run").click().run()
    assert not at.exception and not at.warning and not at.get("download_button")  # the last report is gone
    (message,) = [e.value for e in at.error]
    assert message.startswith("window raised ValueError: no such layer on the split") and "\n" not in message


def stop_the_page_once(marker: Path, within_s: float = 120) -> threading.Thread:
    """Once marker says a window began, end the AppTest page's run as the server ends it on Cancel (a rerun:
    fastReruns stops the run going on) or a closed tab: its script runner is asked to stop, and stops at the page's
    next Streamlit call."""

    def stop() -> None:
        deadline = time.monotonic() + within_s
        while "began" not in (marker.read_text() if marker.exists() else "") and time.monotonic() < deadline:
            time.sleep(0.05)
        threads = [getattr(t, SCRIPT_RUN_CONTEXT_ATTR_NAME, None) for t in threading.enumerate()]
        for context in filter(None, threads):
            context.script_requests.request_stop()

    stopping = threading.Thread(target=stop, daemon=True)
    stopping.start()
    return stopping


@pytest.mark.multiprocess  # a worker process of its own, ended
def test_a_check_cancelled_during_a_long_window_leaves_no_worker_process(code):
    """Cancel while the first of 7 window runs of 10 s each sleeps: the worker says it still works every beat, the
    page's run stops at that call and kills it, long before the window would end."""
    at = page()
    choose(at, "slow.py").button(key="eq_loop_run").click()
    stopping = stop_the_page_once(code / "slow.runs")
    at.run(timeout=120)
    stopping.join()
    pid = int((code / "slow.pid").read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert (code / "slow.runs").read_text().splitlines() == ["began"]  # killed inside the window, not after it
    assert not children_running("gaccum_core.execution.aside", recursive=True)

"""A page's computation done aside, in a worker process of its own (execution/aside.py): the same answer as in
this process, each progress call relayed, errors crossing as themselves, and no process left behind."""

import os

import psutil
import pytest

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.lab.equivalence import compare_gradients
from gaccum_core.execution.aside import call_aside
from workers import children_running

pytestmark = pytest.mark.multiprocess


def test_the_answer_and_the_progress_are_those_of_the_same_call_here():
    config = RunConfig(model="mlp", micro_batch_size=4, accum_steps=2, device="cpu")
    here_progress, aside_progress = [], []
    here = compare_gradients(config, lambda *a: here_progress.append(a))
    aside = call_aside(compare_gradients, config, progress=lambda *a: aside_progress.append(a))
    assert aside_progress == here_progress and aside_progress[-1][0] == aside_progress[-1][1]
    assert aside.equal == here.equal and aside.verdict == here.verdict
    assert aside.table.equals(here.table)


def test_a_refusal_crosses_as_itself_and_a_dead_process_is_said_so(tmp_path, monkeypatch):
    monkeypatch.delenv("GACCUM_USER_CODE", raising=False)
    (tmp_path / "mine.py").write_text("import os\n\ndef build(input_shape, num_classes):\n    os.abort()\n")
    missing = RunConfig(model=f"{tmp_path}/mine.py:nothing", micro_batch_size=4, accum_steps=2, device="cpu")
    with pytest.raises(ConfigError) as refused:
        call_aside(compare_gradients, missing)
    assert refused.value.field == "model" and "a function nothing in" in refused.value.allowed
    aborting = missing.replace(model=f"{tmp_path}/mine.py:build")
    with pytest.raises(RuntimeError, match=r"the worker process computing it exited \(-6\) without an answer"):
        call_aside(compare_gradients, aborting)


def test_the_process_is_killed_when_the_page_stops_waiting():
    """Streamlit stops a page's run by raising in its thread (a rerun, a closed tab): here, in a progress call."""
    config = RunConfig(model="mlp", micro_batch_size=4, accum_steps=2, device="cpu")
    seen = []

    def stop_the_page(*_):
        seen.extend(children_running("gaccum_core.execution.aside"))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        call_aside(compare_gradients, config, progress=stop_the_page)
    (child,) = seen
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    assert child.pid != os.getpid()

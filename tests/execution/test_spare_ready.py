"""The warm spare worker says it is ready once a run can start (torch, the engine, the default data): the Train
page enables Start on that word. The first step's own imports (torch._dynamo, tensorboard's writer) go on in a
thread of the spare, which a run handed over joins before it starts: Start → first point is never spent importing
more than what was left of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gaccum_core.config import RunConfig
from gaccum_core.execution import spares
from gaccum_core.execution import supervisor
from gaccum_core.execution import worker
from gaccum_core.execution.runner import Runner
from gaccum_core.runs.store import RunStore
from gaccum_core.execution.supervisor import Spare

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 180  # only so a broken test fails instead of hanging

# In a spare worker's own process: a thread reads the ready pipe and notes which modules were loaded at that
# word, hands the spare a default run, notes the modules when the run starts (run_worker called) and again once its
# first step's row is written (while step 2 sleeps: GACCUM_FAULTS), stops the run and prints the three lists.
PROBE = """
import json, os, sys, threading, time
from pathlib import Path
from gaccum_core.runs.store import RunStore
read_end, write_end = os.pipe()
os.environ["GACCUM_READY_FD"] = str(write_end)
store, run_id = RunStore(sys.argv[1]), sys.argv[2]
stdin_read, stdin_write = os.pipe()
os.dup2(stdin_read, 0)

def probe():
    os.read(read_end, 64)
    at_ready = sorted(sys.modules)
    os.write(stdin_write, (json.dumps({"run_dir": str(store.path(run_id))}) + "\\n").encode())
    metrics = store.path(run_id) / "metrics.csv"
    while not metrics.exists() or len(metrics.read_text().splitlines()) < 2:
        time.sleep(0.005)
    at_first_step = sorted(sys.modules)
    store.request_stop(run_id)
    print(json.dumps([at_ready, at_start, at_first_step]), flush=True)

at_start = []
from gaccum_core.execution import worker
run_worker = worker.run_worker
def started(*args):
    at_start.extend(sorted(sys.modules))
    return run_worker(*args)
worker.run_worker = started
thread = threading.Thread(target=probe)
thread.start()
worker.serve_spare()
thread.join()
"""


@pytest.mark.multiprocess
def test_the_spare_says_ready_once_a_run_can_start_and_the_run_starts_with_everything_its_first_step_imports(
        tmp_path):
    """At the spare's ready word torch, the engine and the default data set's loaders are loaded; a run handed
    over right then starts only once the first step's imports are done (torch._dynamo, tensorboard's writer), and
    between its start and its first logged step no module of torch, gaccum or any other is imported."""
    store = RunStore(tmp_path)
    run_id = store.create(RunConfig(device="cpu"), None, None)  # the Train page's defaults
    out = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path), run_id], cwd=ROOT, capture_output=True,
                         text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "GACCUM_FAULTS": "slow@2:0*2"})
    assert out.stdout.strip(), f"the spare never said it was ready: {out.stderr[-2000:]}"
    at_ready, at_start, at_first_step = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"torch", "gaccum_core.train.engine", "gaccum_core.execution.execute", "gaccum_core.data.images"} <= set(at_ready)
    assert set(worker.FIRST_STEP_MODULES) <= set(at_start)
    assert sorted(set(at_first_step) - set(at_start)) == []
    assert store.read_status(run_id)["state"] == "stopped"


def _fake_spare(ready: bool) -> Spare:
    """A process standing for a spare worker (it waits for the end of its stdin), ready or still warming."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, text=True)
    event = threading.Event()
    if ready:
        event.set()
    return Spare(proc, event)


def test_the_runner_says_its_spare_is_warming_until_it_is_ready(tmp_path, monkeypatch):
    """spare_warming() (what keeps Start disabled) and the home page's words follow the spare's ready word."""
    warming = _fake_spare(ready=False)
    monkeypatch.setattr(spares, "spawn_spare", lambda: warming)
    runner = Runner(tmp_path, executor="process", warm_spare=True)
    try:
        assert runner.spare_warming()
        assert runner.warm_text() == "warm: a 1-process worker (warming up: importing torch)"
        warming.ready.set()
        assert not runner.spare_warming()
        assert runner.warm_text() == "warm: a 1-process worker"
    finally:
        runner.close()
    assert warming.proc.poll() is not None
    assert not runner.spare_warming() and runner.warm_text() == ""  # closed: nothing kept warm


def test_a_spare_that_dies_before_its_ready_word_is_not_waited_for(monkeypatch):
    """The end of its pipe counts as the word: Start is enabled, and Start gives the run a fresh worker."""
    monkeypatch.setattr(supervisor, "_SPARE", ("-c", "import sys; sys.exit(3)"))  # dies at once, silent
    spare = supervisor.spawn_spare()
    assert spare.ready.wait(WAIT_S)
    assert spare.proc.wait(WAIT_S) == 3


def test_start_waits_for_a_slow_spare_no_longer_than_the_gate(tmp_path, monkeypatch):
    """A spare still importing torch WARM_GATE_S after it started (a very loaded machine) no longer keeps Start
    disabled: a run started then waits for it instead of a page waiting without end."""
    warming = _fake_spare(ready=False)
    monkeypatch.setattr(spares, "spawn_spare", lambda: warming)
    runner = Runner(tmp_path, executor="process", warm_spare=True)
    try:
        assert runner.spare_warming()
        object.__setattr__(warming, "started", warming.started - spares.WARM_GATE_S - 1)  # started that long ago
        assert not runner.spare_warming()
        assert not warming.ready.is_set() and warming.proc.poll() is None  # still warming, still kept
        assert runner.spare_pid == warming.proc.pid
    finally:
        runner.close()

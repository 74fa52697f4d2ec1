"""Process runners: what the tests that start worker processes share (closing them, the spawn fixture)."""

import contextlib
import os
import signal
import time

import psutil
import pytest

from gaccum_core.config import RunConfig
from gaccum_core.execution.runner import Runner
from gaccum_core.execution.snapshot import RunSnapshot


def wait_warm(runner: Runner, timeout_s: float = 180) -> None:
    """Wait until the runner's spare worker is warm: the Train page keeps Start disabled until then."""
    deadline = time.monotonic() + timeout_s
    while runner.spare_warming():
        assert time.monotonic() < deadline, "the spare worker never said it was warm"
        time.sleep(0.05)


def close_now(runner: Runner) -> None:
    """Close the runner, first killing the warm spare it started when the test's last run ended: that spare is
    still importing torch and no run will come, so close() would wait 2 s for it to read the end of its input."""
    if runner.spare_pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(runner.spare_pid, signal.SIGKILL)
    runner.close()


# --- the worker-process executor's tests (tests/runs/test_child*.py) -------------------------------------

CHILD_CONFIG = RunConfig(model="mlp", dataset="digits", micro_batch_size=16, accum_steps=3, max_steps=6, device="cpu")
CHILD_WAIT_S = 180  # only so a broken test fails instead of hanging; passing runs end in seconds


@pytest.fixture
def spawn(tmp_path, monkeypatch):
    """Makes process-executor runners whose workers inherit `faults` (GACCUM_FAULTS); closes them after.

    warm_spare=True keeps a warm spare, as the dashboard does, for the tests of handing runs to it; the others
    start a worker per run, so that no spare warmed after the test's last run is killed at close mid-import
    (seconds of CPU on a machine the whole suite shares)."""
    runners = []

    def make(faults: str = "", stop_grace_s: float = 5.0, warm_spare: bool = False) -> Runner:
        monkeypatch.setenv("GACCUM_FAULTS", faults)  # the test's workers (and a spare, spawned now) inherit it
        runner = Runner(tmp_path / f"runs{len(runners)}", executor="process", stop_grace_s=stop_grace_s,
                        warm_spare=warm_spare)
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        close_now(runner)


def ended(runner: Runner, run_id: str) -> RunSnapshot:
    """The run's snapshot once it has ended (failing the test after CHILD_WAIT_S)."""
    snapshot = runner.wait(run_id, timeout=CHILD_WAIT_S)
    assert snapshot.done, f"run {run_id} never ended: {snapshot.state}"
    return snapshot


def command_line(proc: psutil.Process) -> str:
    """The process's command line, '' once it has exited, is a zombie not yet reaped, or is not ours to read: a
    poll of a process's children races their ends."""
    try:
        return " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):  # ZombieProcess is a NoSuchProcess
        return ""


def children_running(module: str, recursive: bool = False) -> list[psutil.Process]:
    """This process's children (and theirs, recursive) whose command line names `module`."""
    return [p for p in psutil.Process().children(recursive=recursive) if module in command_line(p)]


def gone(pid: int) -> bool:
    """Whether the process has exited (or is a zombie) within 10 s."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.05)
    return False

"""Issue 29 J: what a failed torchrun job's run says. Which rank failed it: a stand-in torchrun (a process
that prints what torch 2.14's torchrun printed, copied from real jobs whose rank 0 was SIGKILLed, and exits
1) is supervised as a job is, its ranks' error files the ones those jobs wrote; and a job that died on a
full disk says the disk is full. No torchrun is started."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from gaccum_core.config import RunConfig
from gaccum_core.runs.files import disk_full
from gaccum_core.runs.store import RunStore
from gaccum_core.execution.supervisor import Child
from gaccum_core.states import RunState

_FAILURE = """[{rank}]:
  time      : 2026-11-25_13:02:16
  host      : localhost
  rank      : {rank} (local_rank: {rank})
  exitcode  : {exitcode} (pid: 998{rank}) {signal}
  error_file: {file}
  traceback : {traceback}"""
_RULE = "-" * 60


def report(rank1: dict, rank0: dict) -> str:
    """torchrun's report of a failed job: rank 1 among the failures, rank 0 as the root cause."""
    return "\n".join(["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 60,
                      "gaccum_core FAILED", _RULE, "Failures:", _FAILURE.format(rank=1, **rank1), _RULE,
                      "Root Cause (first observed failure):", _FAILURE.format(rank=0, **rank0), "=" * 60, ""])


_RANK1_TRACEBACK = """Traceback (most recent call last):
    File "/work/main/gaccum_core/execution/worker.py", line 106, in run_worker
      state, message = execute(store, run_id, config, device, should_stop, ranks=ranks)
  RuntimeError: Got the following error when running the callback: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:12953.
  
  At:
    /work/main/.venv/lib/python3.11/site-packages/torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py(31): <lambda>"""
_CONNECTION_CLOSED = ("RuntimeError: Got the following error when running the callback: RuntimeError: [/__w/pytorch/"
                      "pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer "
                      "[127.0.0.1]:12953.\n\nAt:\n  default_hooks.py(31): <lambda>\n")
_ERROR_FILE = "/runs/x/torchrun/421aa822_3tktk6yf/attempt_0/1/error.json"
_KILLED = dict(exitcode=-9, signal=" (SIGKILL)", file="<N/A>", traceback="Signal 9 (SIGKILL) received by PID 9980")
_CLOSED_BY_TORCHRUN = ("W1125 13:02:52.849000 10909 .venv/lib/python3.11/site-packages/torch/distributed/elastic/"
                       "multiprocessing/api.py:1028] Sending process 9981 closing signal SIGTERM\n")


class StandInJob:
    """Supervises a stand-in torchrun that prints `stderr` and exits 1, its rank 1 having written `error`
    (None: no error file); the run's final state and message."""

    def __init__(self, root) -> None:
        self.store = RunStore(root)
        self.run_id = self.store.create(RunConfig(model="mlp", nproc=2, device="cpu"))

    def __call__(self, stderr: str, error: str | None) -> tuple[str, str]:
        if error is not None:
            where = self.store.torchrun_log_dir(self.run_id) / "421aa822_3tktk6yf" / "attempt_0" / "1" / "error.json"
            where.parent.mkdir(parents=True)
            where.write_text(json.dumps({"message": {"message": error, "extraInfo": {
                "py_callstack": "Traceback (most recent call last): ...", "timestamp": "1795611736"}}}))
        stand_in = subprocess.Popen([sys.executable, "-c", "import sys; sys.stderr.write(sys.argv[1]); sys.exit(1)",
                                     stderr], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        child = Child(stand_in, self.store, self.run_id)
        return child.supervise(threading.Event(), lambda *rows: None, lambda status: None, grace_s=1.0)


@pytest.fixture
def job(tmp_path) -> StandInJob:
    return StandInJob(tmp_path / "runs")


def test_a_killed_rank_0_is_the_cause_not_rank_1s_connection_closed_after_it(job):
    """The issue's job: rank 0 SIGKILLed mid-window, rank 1's all-reduce then fails on the closed connection
    (its error file says so, and gloo aborts it)."""
    aborted = dict(exitcode=-6, signal=" (SIGABRT)", file=_ERROR_FILE, traceback=_RANK1_TRACEBACK)
    stderr = "[rank1]: Traceback (most recent call last):\n" + report(aborted, _KILLED)
    state, message = job(stderr, _CONNECTION_CLOSED)
    assert state == RunState.FAILED
    assert message.startswith("rank 0 died (signal SIGKILL (9)) with no error of its own; after it, rank 1 failed: "
                              "RuntimeError: Got the following error"), message


def test_a_rank_torchrun_ended_itself_is_not_the_cause(job):
    """Rank 0 SIGKILLed while rank 1 was between collectives: torchrun ends rank 1 with SIGTERM, and reports
    it as a failure of its own; no rank wrote an error file."""
    ended = dict(exitcode=-15, signal=" (SIGTERM)", file="<N/A>", traceback="Signal 15 (SIGTERM) received by PID 9981")
    stderr = _CLOSED_BY_TORCHRUN + report(ended, _KILLED)
    state, message = job(stderr, None)
    assert (state, message) == (RunState.FAILED, "rank 0 died (signal SIGKILL (9)) with no error of its own")


def test_a_rank_that_failed_in_python_is_the_cause_when_no_rank_was_killed(job):
    """Rank 1 raised (its error file), and torchrun then ended rank 0 with SIGTERM."""
    raised = dict(exitcode=1, signal="", file=_ERROR_FILE, traceback=_RANK1_TRACEBACK)
    ended = dict(exitcode=-15, signal=" (SIGTERM)", file="<N/A>", traceback="Signal 15 (SIGTERM) received by PID 9980")
    stderr = _CLOSED_BY_TORCHRUN.replace("9981", "9980") + report(raised, ended)
    state, message = job(stderr, "ValueError: a bad batch\n\nAt:\n  engine.py(1): run\n")
    assert (state, message) == (RunState.FAILED, "rank 1 failed: ValueError: a bad batch")


def test_a_job_that_died_on_a_full_disk_says_the_disk_is_full_not_which_file_was_last(job, monkeypatch):
    """No rank could write its error file or the final state, nor the supervisor the job's stderr: as on a
    full disk, where traceback.txt is the last file written (test_disk_full fills a real one)."""
    run_dir = job.store.path(job.run_id)

    def full(self, run_id, text):
        raise disk_full(run_dir, "traceback.txt")

    monkeypatch.setattr(RunStore, "write_traceback", full)
    state, message = job("[rank0]: OSError: [Errno 28] No space left on device\n", None)
    assert state == RunState.FAILED
    assert message.startswith(f"no space left on the device holding {run_dir.resolve()}"), message
    assert "traceback.txt" not in message and "died (exit code 1)" in message

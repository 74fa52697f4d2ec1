"""Supervising a run in a worker process (or a torchrun job) from the server or the CLI.

The supervisor follows metrics.csv and eval.csv as the worker appends them, asks it to stop through
the run's stop file, kills it (with every process it started) when it has not ended a few seconds
later, and turns its end into a final state: the one the worker wrote, the rank whose end failed a
torchrun job (rank_failures), or, when it died without a word, its exit code or signal and the last
lines of its stderr. A warm spare worker (torch already imported) keeps Start → first point short.
A torchrun it starts for a run is killed when the thread that started it ends, however the server or
CLI dies: torchrun waiting for the other machines at a rendezvous has no rank yet to notice.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable

import psutil

from gaccum_core.config import RunConfig
from gaccum_core.runs.files import DiskFullError, disk_full, write_text_atomically
from gaccum_core.execution.rank_failures import exit_words, job_failure, report_line
from gaccum_core.runs.store import RunStore
from gaccum_core.states import FINAL_STATES, Outcome, RunState
from gaccum_core.train.metrics import Row

_WORKER = ("-m", "gaccum_core", "worker")
# A spare starts the worker without the command line's parser and commands: 0.45 s less to import (2.84 -> 2.38 s
# from spawn to ready, medians of 5, measured), which Start waits for on a cold server.
_SPARE = ("-c", "from gaccum_core.execution.worker import main; main(None, None, spare=True)")
JOB_FILE = "job.json"  # the run a warm torchrun job's ranks wait for in their spare directory
READY_FD_ENV = "GACCUM_READY_FD"  # the pipe on which a warm spare says it is ready for a run's first step
TEARDOWN_GRACE = 6  # times the stop grace a worker that wrote its final state may take to exit
STDERR_LINES = 20  # how much of a dead worker's stderr its failure message quotes


def stopped_before_first_step(from_step: int) -> str:
    """The message of a run stopped before it took an optimizer step (from_step: where it resumed, 0 if new)."""
    return "stopped before its first step" + (f" after resuming at step {from_step}" if from_step else "")


@dataclass(frozen=True)
class Launch:
    """This machine's place in a data-parallel job over several machines (config.nnodes of them)."""

    node_rank: int = 0
    rdzv_endpoint: str = ""  # HOST:PORT of node rank 0's machine


def torchrun_command(config: RunConfig, launch: Launch, log_dir: Path | None, worker_args: list[str]) -> list[str]:
    """`python -m torch.distributed.run ... -m gaccum_core worker ...`: torchrun starting this machine's ranks.

    One machine: --standalone (a free port of its own). Several: static rendezvous at node 0's endpoint, so
    global ranks follow --node-rank and node 0 holds global rank 0; ValueError without one."""
    if config.nnodes > 1 and not launch.rdzv_endpoint:
        raise ValueError(f"nnodes={config.nnodes} needs node rank 0's HOST:PORT (`run --rdzv-endpoint`) on every "
                         "machine; this command has none")
    if config.nnodes == 1:
        rendezvous = ["--standalone"]
    else:
        rendezvous = [f"--nnodes={config.nnodes}", f"--node-rank={launch.node_rank}",
                      f"--rdzv-endpoint={launch.rdzv_endpoint}"]
    logs = [f"--log-dir={log_dir}"] if log_dir is not None else []
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={config.nproc}", *rendezvous,
            *logs, *_WORKER, *worker_args]


_SOURCE_ROOT = str(Path(__file__).resolve().parents[2])  # `-m gaccum_core` from any working directory
OWNER_ENV = "GACCUM_OWNER_PID"  # the server or CLI whose death stops every worker and rank it started


_PR_SET_PDEATHSIG = 1  # Linux prctl: the signal a process gets when the thread that started it ends


def dies_with_this_thread() -> Callable[[], None] | None:
    """A preexec_fn that has the child SIGKILLed when this thread (or this process, however it dies) ends; None
    where the kernel has no prctl. Resolved here, in the parent: the forked child calls it and nothing else.
    SIGKILL, not SIGTERM: torchrun would pass a SIGTERM on to its ranks mid-step, whereas ranks whose torchrun
    is gone stop at their next micro-batch and write the run's final state."""
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    if prctl is None:
        return None
    parent = os.getpid()

    def tie() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # it died before the tie was made
            os._exit(1)
    return tie


def child_env() -> dict[str, str]:
    """This environment for a child process of gaccum's: gaccum_core on its path, this process as its owner."""
    path = os.pathsep.join(p for p in (_SOURCE_ROOT, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, OWNER_ENV: str(os.getpid())}


def _popen(command: list[str], stdin: int | None = None, tied: bool = False,
           env: dict[str, str] | None = None, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
    # Its own session: a Ctrl-C meant for the server or the CLI does not hit the worker mid-step;
    # the supervisor stops it through the stop file instead. tied: only from a thread that outlives it.
    return subprocess.Popen(command, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True, text=True, errors="replace", env=env or child_env(),
                            pass_fds=pass_fds, preexec_fn=dies_with_this_thread() if tied else None)


def join_job(config: RunConfig, launch: Launch) -> int:
    """On a machine of node rank > 0: this machine's ranks of the job whose node 0 writes the run, until they
    end; torchrun's exit status. It shares the CLI's terminal (a Ctrl-C reaches it too) and ends with the CLI."""
    command = torchrun_command(config, launch, None, ["--config", config.to_json()])
    proc = subprocess.Popen(command, env=child_env(), preexec_fn=dies_with_this_thread())
    try:
        return proc.wait()
    except KeyboardInterrupt:  # torchrun had the terminal's Ctrl-C too and stops its ranks; a second stops waiting
        try:
            proc.wait()
        except KeyboardInterrupt:
            kill_tree(proc)
        return 130


@dataclass(frozen=True)
class Spare:
    """A warm spare worker: its process, and `ready`, set once it has imported and loaded everything a run's
    first step needs (READY_FD_ENV), or has died before: then `proc` has exited."""

    proc: subprocess.Popen
    ready: threading.Event
    started: float = field(default_factory=time.monotonic)  # when it was spawned (time.monotonic())


def spawn_spare() -> Spare:
    """A worker that imports torch, the engine and the default data now, says so, and waits for a run on stdin."""
    read_end, write_end = os.pipe()
    try:
        proc = _popen([sys.executable, *_SPARE], stdin=subprocess.PIPE,
                      env={**child_env(), READY_FD_ENV: str(write_end)}, pass_fds=(write_end,))
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)  # the worker holds the only write end: its exit is the end of the pipe
    ready = threading.Event()
    threading.Thread(target=_await_ready, args=(read_end, ready), daemon=True,
                     name=f"gaccum-spare-{proc.pid}").start()
    return Spare(proc, ready)


def _await_ready(read_end: int, ready: threading.Event) -> None:
    """Set `ready` when the spare writes its line, or when it exits without one (the end of the pipe)."""
    try:
        os.read(read_end, 64)
    finally:
        os.close(read_end)
        ready.set()


def spawn_spare_job(config: RunConfig, spare_dir: Path) -> subprocess.Popen:
    """A one-machine torchrun job of config.nproc ranks that warm up now (torch, the engine, the default
    data) and wait for a run's job file in spare_dir: torchrun's and the ranks' start-up is then done
    before Start, not after it."""
    command = torchrun_command(config, Launch(), spare_dir / "torchrun", ["--spare-dir", str(spare_dir)])
    return _popen(command)


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the process and everything it started (torchrun's ranks live in sessions of their own)."""
    if proc.poll() is not None:
        return  # already reaped: its pid may belong to someone else by now
    try:
        victims = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        victims = []
    for victim in victims:
        try:
            victim.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    proc.wait()


def _drain(stream: IO[str], tail: deque[str], report: list[str]) -> None:
    for line in stream:
        tail.append(line.rstrip("\n"))
        if report_line(line):
            report.append(line.rstrip("\n"))


class Child:
    """One run's worker process (a handed-over spare, a direct worker, or torchrun) and its supervision."""

    def __init__(self, proc: subprocess.Popen, store: RunStore, run_id: str, log_dir: Path | None = None) -> None:
        self.proc, self.store, self.run_id = proc, store, run_id
        self.log_dir = log_dir if log_dir is not None else store.torchrun_log_dir(run_id)  # ranks' error files
        self.tail: deque[str] = deque(maxlen=STDERR_LINES)
        self.report: list[str] = []  # torchrun's report of its failed ranks, from the whole of its stderr
        self._drainer = threading.Thread(target=_drain, args=(proc.stderr, self.tail, self.report), daemon=True,
                                         name=f"gaccum-stderr-{proc.pid}")
        self._drainer.start()

    @classmethod
    def hand_over(cls, spare: subprocess.Popen, store: RunStore, run_id: str) -> "Child":
        """Give a warm spare its run."""
        assert spare.stdin is not None
        spare.stdin.write(json.dumps({"run_dir": str(store.path(run_id).resolve())}) + "\n")
        spare.stdin.close()
        return cls(spare, store, run_id)

    @classmethod
    def hand_over_job(cls, job: subprocess.Popen, spare_dir: Path, store: RunStore, run_id: str) -> "Child":
        """Give a warm torchrun job (spawn_spare_job) its run: every rank reads the job file."""
        write_text_atomically(spare_dir / JOB_FILE, json.dumps({"run_dir": str(store.path(run_id).resolve())}))
        return cls(job, store, run_id, spare_dir / "torchrun")

    @classmethod
    def torchrun(cls, store: RunStore, run_id: str, config: RunConfig, launch: Launch = Launch()) -> "Child":
        """Start a data-parallel job whose global rank 0 writes this run (from the thread that supervises it)."""
        run_dir = str(store.path(run_id).resolve())
        command = torchrun_command(config, launch, store.torchrun_log_dir(run_id), ["--run-dir", run_dir])
        return cls(_popen(command, tied=True), store, run_id)

    def supervise(self, stop: threading.Event, on_rows: Callable[[list[Row], list[Row]], None],
                  on_status: Callable[[dict], None], grace_s: float, poll_s: float = 0.05) -> Outcome:
        """Follow the run until its worker exits; stop it on `stop`: at once while the worker is still
        starting (it has not begun training, so nothing is lost), else kill it grace_s later."""
        metrics, evals = self.store.followers(self.run_id)
        # Read before the worker can have begun (it imports and loads first): the rows a resumed run
        # kept, and the segments it ran; the worker adds a segment when it begins training.
        kept = metrics.read()
        from_step, segments = len(kept), self._segments()
        on_rows(kept, [])
        stop_sent: float | None = None
        killed: str | None = None  # why it was killed, if it was
        total_known = False
        while True:
            exited = self.proc.poll() is not None
            steps = metrics.read()
            from_step = None if steps else from_step  # None once this worker logged a step
            on_rows(steps, evals.read())  # after poll(): rows written before the exit are all read
            if not total_known:
                status = self._status()
                total_known = "total_steps" in status
                on_status(status)
            if exited:
                break
            if stop.is_set() and stop_sent is None:
                self.store.request_stop(self.run_id)
                stop_sent = time.monotonic()
            if stop_sent is not None:
                killed = self._kill_reason(time.monotonic() - stop_sent, grace_s, from_step, segments)
                if killed is not None:
                    kill_tree(self.proc)
                    continue
            time.sleep(poll_s)
        self._drainer.join(timeout=2.0)
        return self._outcome(killed)

    def _kill_reason(self, waited_s: float, grace_s: float, from_step: int | None, segments: int) -> str | None:
        """Why a worker asked to stop is killed now (the run's final message), or None to wait on."""
        if from_step is not None and self._segments() == segments:
            return stopped_before_first_step(from_step)  # still starting: importing, loading, building
        if not self._overdue(waited_s, grace_s):
            return None
        ended = "stopped by the user" if from_step is None else stopped_before_first_step(from_step)
        return (f"{ended}: the worker had not stopped {grace_s:g} s after the request (compiling or hung), so it "
                "was killed; every row written so far is kept")

    def _segments(self) -> int:
        """How many training segments status.json records (a worker adds one as it begins training)."""
        segments = self._status().get("segments")
        return len(segments) if isinstance(segments, list) else 0

    def _overdue(self, waited_s: float, grace_s: float) -> bool:
        """Past the grace period and not ending: a worker that already wrote its final state is only
        tearing down (torchrun's ranks take seconds to exit) and gets longer before it is killed."""
        if waited_s <= grace_s:
            return False
        return self._status().get("state") not in FINAL_STATES or waited_s > TEARDOWN_GRACE * grace_s

    def _status(self) -> dict:
        try:
            return self.store.read_status(self.run_id)
        except (OSError, ValueError):
            return {}

    def _outcome(self, killed: str | None) -> Outcome:
        code = self.proc.returncode
        if killed is not None:
            return RunState.STOPPED, killed
        failed_rank = job_failure(self.log_dir, self.report) if code != 0 else ""
        if failed_rank:
            return RunState.FAILED, failed_rank
        status = self._status()
        if status.get("state") in FINAL_STATES:
            return RunState(status["state"]), status.get("message", "")
        died = f"the worker process died ({exit_words(code)}) without writing a final state"
        try:
            if self.tail:
                self.store.write_traceback(self.run_id, "\n".join(self.tail))
        except DiskFullError:  # what failed the run too, most likely: said of the run, not of traceback.txt
            full = disk_full(self.store.path(self.run_id), "the run's files")
            died = f"{full}; {died}"
        last = " | ".join(line.strip() for line in list(self.tail)[-3:] if line.strip())
        return RunState.FAILED, died + (f"; its stderr ends: {last[-400:]}" if last else "")


def terminate_on_exit(proc: subprocess.Popen) -> None:
    """Close a spare's stdin (it exits on EOF); kill it if it does not."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=2.0)
    except (OSError, subprocess.TimeoutExpired):
        os.kill(proc.pid, signal.SIGKILL)

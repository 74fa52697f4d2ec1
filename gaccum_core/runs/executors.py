"""Where a tracked run trains: in the runner's thread, or in a worker process supervised from it.

executor "thread" calls execute() in the device's thread; executor "process" hands the run to the
warm spare worker (torch already imported, so Start → first point stays short) and follows the rows
it writes from that thread. A data-parallel run always trains under torchrun, supervised the same
way. The tracked run is changed only under the runner's lock.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

from gaccum_core.config import RunConfig
from gaccum_core.runs.execute import execute
from gaccum_core.runs.snapshot import TrackedRun
from gaccum_core.runs.store import RunStore
from gaccum_core.runs.supervisor import Child, kill_tree, spawn_spare, spawn_spare_job, terminate_on_exit
from gaccum_core.states import Outcome
from gaccum_core.train.device import device_name
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import Row, RowKeeper

EXECUTORS = ("process", "thread")


def distributed(config: RunConfig) -> bool:
    """A data-parallel run: torchrun starts its processes."""
    return config.world_size > 1


def train_here(store: RunStore, run: TrackedRun, lock: threading.Lock) -> Outcome:
    """Train the run in this thread; its final state and message."""
    device = torch.device(run.device_key)
    run.device = device_name(device)

    def started(engine: Engine) -> None:
        with lock:
            run.total_steps = engine.total_steps

    def say(text: str) -> None:  # what the run does before its first step (tokenising its corpus)
        with lock:
            run.message = text

    return execute(store, run.run_id, run.config, device, run.stop_event.is_set, run.rows, started, on_message=say)


def supervise(child: Child, run: TrackedRun, lock: threading.Lock, grace_s: float) -> Outcome:
    """Follow the run's worker process until it exits, keeping its rows and status in the tracked run;
    its final state and message. A worker left running when supervision itself fails is killed."""
    with lock:
        run.pid = child.proc.pid
        run.rows = RowKeeper(lock)  # a resumed run's earlier rows come back through the followers
    sink = run.rows

    def rows(metrics: list[Row], evals: list[Row]) -> None:
        for row in metrics:
            sink.log_step(row)
        for row in evals:
            sink.log_eval(row)

    def status(fields: dict) -> None:
        with lock:
            run.total_steps = fields.get("total_steps", run.total_steps)
            run.device = fields.get("device", run.device)
            run.message = fields.get("message", run.message)  # tokenising progress, before the first step

    try:
        return child.supervise(run.stop_event, rows, status, grace_s)
    finally:
        if child.proc.poll() is None:  # no worker trains unwatched
            kill_tree(child.proc)


class SpareWorker:
    """The warm spare worker a process runner keeps: a run is handed to it, then the next one warms up.

    keep=False keeps none (a one-run CLI, the thread executor): each run gets a fresh worker."""

    def __init__(self, keep: bool) -> None:
        self._keep, self._lock = keep, threading.Lock()
        self._proc: subprocess.Popen | None = spawn_spare() if keep else None

    @property
    def pid(self) -> int | None:
        """The waiting spare's process id (it may have died since), or None when none waits."""
        with self._lock:
            return self._proc.pid if self._proc is not None else None

    def hand_over(self, store: RunStore, run_id: str) -> Child:
        """Give the run to the spare; to a fresh worker when there is none or it died."""
        with self._lock:
            spare, self._proc = self._proc, None
        if spare is not None:
            try:
                return Child.hand_over(spare, store, run_id)
            except OSError:  # it died while waiting (killed, out of memory): its pipe is broken
                kill_tree(spare)
        return Child.hand_over(spawn_spare(), store, run_id)

    def refill(self) -> None:
        """Start warming the next spare, unless none is kept (or close() was called)."""
        with self._lock:
            if self._keep and self._proc is None:
                self._proc = spawn_spare()

    def close(self) -> None:
        """Keep no spare from now on; the waiting one exits on its own."""
        with self._lock:
            spare, self._proc, self._keep = self._proc, None, False
        if spare is not None:
            terminate_on_exit(spare)


class SpareJob:
    """A warm torchrun job for the data-parallel run about to start: prepared when a page sets N > 1 on
    one machine, taken by the next run with that N (a run with another N starts its own torchrun).

    keep=False keeps none. Its ranks exit on their own when the server goes; a replaced or closed job
    is killed with every rank it started."""

    def __init__(self, keep: bool) -> None:
        self._keep, self._lock = keep, threading.Lock()
        self._job: tuple[subprocess.Popen, int, Path] | None = None

    def prepare(self, config: RunConfig) -> None:
        """Warm a job for config's N ranks on this machine, unless one waits already (N ≤ 1: none)."""
        wanted = config.nproc if self._keep and config.nnodes == 1 and config.world_size > 1 else 0
        with self._lock:
            job = self._job
            if job is not None and job[1] == wanted and job[0].poll() is None:
                return
            self._job = None
            if wanted:
                spare_dir = Path(tempfile.mkdtemp(prefix="gaccum-spare-job-"))
                self._job = (spawn_spare_job(config, spare_dir), wanted, spare_dir)
        if job is not None:
            _discard(*job)

    def take(self, store: RunStore, run_id: str, config: RunConfig) -> Child | None:
        """The waiting job, given this run, when it has config's N ranks and still lives; else None."""
        with self._lock:
            job, self._job = self._job, None
        if job is None:
            return None
        proc, nproc, spare_dir = job
        if config.nnodes != 1 or nproc != config.nproc or proc.poll() is not None:
            _discard(*job)
            return None
        return Child.hand_over_job(proc, spare_dir, store, run_id)

    def close(self) -> None:
        """Keep no job from now on; kill the waiting one."""
        with self._lock:
            job, self._job, self._keep = self._job, None, False
        if job is not None:
            _discard(*job)


def _discard(proc: subprocess.Popen, _nproc: int, spare_dir: Path) -> None:
    """Kill a job nobody will use and remove its directory."""
    kill_tree(proc)
    shutil.rmtree(spare_dir, ignore_errors=True)


def keep_job_logs(child: Child, store: RunStore, run_id: str) -> None:
    """After a warm job's run: its ranks' error files go to the run's torchrun folder (where a run started
    by its own torchrun keeps them), and the job's directory is removed."""
    target = store.torchrun_log_dir(run_id)
    if child.log_dir != target and child.log_dir.is_dir():
        if not target.exists() and store.path(run_id).is_dir():
            shutil.move(str(child.log_dir), str(target))
        shutil.rmtree(child.log_dir.parent, ignore_errors=True)

"""Where a tracked run trains: in the runner's thread, or in a worker process supervised from it.

executor "thread" calls execute() in the device's thread; executor "process" hands the run to the
warm spare worker (torch already imported, so Start → first point stays short) and follows the rows
it writes from that thread. A data-parallel run always trains under torchrun, supervised the same
way. The tracked run is changed only under the runner's lock.
"""

from __future__ import annotations

import subprocess
import threading

import torch

from gaccum_core.config import RunConfig
from gaccum_core.runs.execute import execute
from gaccum_core.runs.snapshot import TrackedRun
from gaccum_core.runs.store import RunStore
from gaccum_core.runs.supervisor import Child, kill_tree, spawn_spare, terminate_on_exit
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

    return execute(store, run.run_id, run.config, device, run.stop_event.is_set, run.rows, started)


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

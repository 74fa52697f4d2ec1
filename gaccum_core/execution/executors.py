"""Where a tracked run trains: in the runner's thread, or in a worker process supervised from it.

executor "thread" calls execute() in the device's thread; executor "process" hands the run to the
warm spare worker (gaccum_core.execution.spares) and follows the rows it writes from that thread. A
data-parallel run always trains under torchrun, supervised the same way. The tracked run is changed
only under the runner's lock.
"""

from __future__ import annotations

import shutil
import threading

import torch

from gaccum_core.config import RunConfig
from gaccum_core.execution.execute import execute
from gaccum_core.execution.server_env import EXECUTORS  # noqa: F401 (the one list, where the server checks it)
from gaccum_core.execution.snapshot import TrackedRun
from gaccum_core.runs.store import RunStore
from gaccum_core.execution.supervisor import Child, kill_tree
from gaccum_core.states import Outcome
from gaccum_core.train.device import device_name
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import Row, RowKeeper


def distributed(config: RunConfig) -> bool:
    """A data-parallel run: torchrun starts its processes."""
    return config.world_size > 1


def train_here(store: RunStore, run: TrackedRun, lock: threading.Lock) -> Outcome:
    """Train the run in this thread; its final state and message."""
    device = torch.device(run.devices[0])  # one device: a data-parallel run never trains here
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


def keep_job_logs(child: Child, store: RunStore, run_id: str) -> None:
    """After a warm job's run: its ranks' error files go to the run's torchrun folder (where a run started
    by its own torchrun keeps them), and the job's directory is removed."""
    target = store.torchrun_log_dir(run_id)
    if child.log_dir != target and child.log_dir.is_dir():
        if not target.exists() and store.path(run_id).is_dir():
            shutil.move(str(child.log_dir), str(target))
        shutil.rmtree(child.log_dir.parent, ignore_errors=True)

"""The worker process: `python -m gaccum_core worker` trains one run outside the server.

Started four ways: as a warm spare (main(spare=True), called without the command line's parser: torch
and the engine imported, the default data loaded, it says so on the pipe GACCUM_READY_FD names, then
waits on stdin for a run directory), as a rank of a warm torchrun job (`--spare-dir`: warmed the same
way, it waits for a job file), directly on a run directory (`--run-dir`), or by torchrun on every rank
of a data-parallel job (ranks on other machines get the config as `--config` JSON, since only global
rank 0 has the run directory). The server asks it to stop through the run's stop file; it also stops
when the process that started it goes away, so no orphan keeps a GPU.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import NoReturn

import psutil

from gaccum_core.config import RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.execution.execute import execute
from gaccum_core.runs.store import RunStore, now_iso
from gaccum_core.execution.supervisor import JOB_FILE, OWNER_ENV, READY_FD_ENV
from gaccum_core.states import RunState
from gaccum_core.train.device import resolve_device
from gaccum_core.train.distributed import Ranks, init_process_group, share_from_rank0, worker_device

ORPHANED = "the process that started the run exited"  # after "stopped: " wherever it is shown


OWNER_CHECK_S = 0.5  # how often a worker looks whether the process that started its run still lives


class _Owner:
    """The server or CLI that started the run (OWNER_ENV), which torchrun's ranks would otherwise outlive:
    their parent is the torchrun agent, in a session of its own, which nothing stops when the CLI dies."""

    def __init__(self, pid: int) -> None:
        try:
            self._process: psutil.Process | None = psutil.Process(pid)
        except psutil.NoSuchProcess:
            self._process = None  # gone before this worker started
        self._checked, self._alive = 0.0, self._process is not None

    def alive(self) -> bool:
        """Whether it still runs (same pid and start time, not a zombie); looked at every OWNER_CHECK_S."""
        now = time.monotonic()
        if self._alive and now - self._checked >= OWNER_CHECK_S:
            self._checked = now
            try:
                self._alive = self._process.is_running() and self._process.status() != psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                self._alive = False
        return self._alive


class _StopRequest:
    """A run's stop check in a worker: the stop file on rank 0, its parent process gone, or the server or
    CLI that started the run gone."""

    def __init__(self, stop_file: Path | None) -> None:
        self.parent, self.stop_file = os.getppid(), stop_file
        owner = os.environ.get(OWNER_ENV, "")
        self.owner = _Owner(int(owner)) if owner.isdigit() else None

    def orphaned(self) -> bool:
        """The supervisor (server, CLI or torchrun agent) or the process that started the run is gone."""
        return os.getppid() != self.parent or (self.owner is not None and not self.owner.alive())

    def __call__(self) -> bool:
        # A stat and a getppid per micro-batch (and the owner's /proc entry twice a second): microseconds.
        return self.orphaned() or (self.stop_file is not None and self.stop_file.exists())


def _locate(run_dir: str | None) -> tuple[RunStore | None, str]:
    if run_dir is None:
        return None, ""
    path = Path(run_dir).resolve()
    return RunStore(path.parent), path.name


def _rank0_config(config: RunConfig) -> RunConfig:
    """Rank 0's config on every rank: machines started with different flags still train one run."""
    return RunConfig.from_json(share_from_rank0(config.to_json()))


def run_worker(run_dir: str | None, config_json: str | None = None) -> int:
    """Train one run on this rank; rank 0 writes its final state. The exit status tells torchrun."""
    import torch.distributed as dist

    ranks = Ranks.from_env()
    store, run_id = _locate(run_dir)
    if ranks.is_main and store is None:
        raise SystemExit("gaccum: error: worker: global rank 0 needs --run-dir")
    config = store.read_config(run_id) if store is not None else RunConfig.from_json(config_json or "{}")
    store = store if ranks.is_main else None  # only global rank 0 writes the run directory
    device = worker_device(ranks, resolve_device(config.device))
    should_stop = _StopRequest(store.stop_path(run_id) if store is not None else None)
    if ranks.distributed:
        init_process_group(ranks, device, config)
        config = _rank0_config(config)
    try:
        state, message = execute(store, run_id, config, device, should_stop, ranks=ranks)
    finally:
        if ranks.distributed and dist.is_initialized():
            dist.destroy_process_group()
    if state == RunState.STOPPED and should_stop.orphaned():
        message = ORPHANED
    if store is not None:
        store.update_status(run_id, state=state, message=message, ended=now_iso())
    # A failed rank 0 exits non-zero so that torchrun ends the job's other ranks at once.
    return 1 if ranks.distributed and state == RunState.FAILED else 0


JOB_POLL_S = 0.02  # how often a warm torchrun job's rank looks for its job file
# What a run's first step imports on first use: torch._dynamo (torch.optim's first optimizer, ~1.6 s, measured),
# and what tensorboard.out writes a run's event files with (184 modules; torch's hparams() imports the last).
FIRST_STEP_MODULES = ("torch._dynamo", "torch.utils.tensorboard.summary", "tensorboard.compat.proto.event_pb2",
                      "tensorboard.summary.writer.record_writer", "tensorboard.plugins.hparams.metadata")


def _warm_up() -> threading.Thread:
    """What every run's start would otherwise wait for: the default data set, loaded here, and FIRST_STEP_MODULES,
    imported by the thread returned (about 1.1 s, half the warm-up: a run handed over joins it before it starts, so
    no two threads ever import at once)."""
    load_data(RunConfig())
    imports = threading.Thread(target=_import_first_step_modules, name="gaccum-first-step-imports", daemon=True)
    imports.start()
    return imports


def _import_first_step_modules() -> None:
    for module in FIRST_STEP_MODULES:
        importlib.import_module(module)


def _say_ready() -> None:
    """Tell the server this spare is warm (a line on the pipe READY_FD_ENV names), so that its Start is enabled."""
    fd = os.environ.pop(READY_FD_ENV, "")
    if fd.isdigit():
        os.write(int(fd), b"ready\n")
        os.close(int(fd))


def serve_spare() -> int:
    """Warm up, say so, then wait for one job line ({"run_dir": ...}) on stdin and run it; exit on EOF. Ready is
    said once a run can start (torch, the engine, the default data): Start is enabled then, and a run handed over
    before the first step's imports are done waits for their rest, never longer than it would have waited for
    Start (tests/execution/test_spare_ready.py)."""
    imports = _warm_up()
    _say_ready()
    line = sys.stdin.readline()
    if not line.strip():
        return 0  # the server exited before handing over a run
    imports.join()
    return run_worker(json.loads(line)["run_dir"])


def serve_spare_job(spare_dir: str) -> int:
    """A rank of a warm torchrun job: warm up, then wait for spare_dir/job.json ({"run_dir": ...}) and
    train that run on this rank; exit when the server that started the job goes away first."""
    imports = _warm_up()
    job, gone = Path(spare_dir) / JOB_FILE, _StopRequest(None)
    while not job.exists():
        if gone.orphaned():
            return 0
        time.sleep(JOB_POLL_S)
    imports.join()
    return run_worker(json.loads(job.read_text(encoding="utf-8"))["run_dir"])


def main(run_dir: str | None, config_json: str | None, spare: bool, spare_dir: str | None = None) -> NoReturn:
    """The worker sub-command, exiting with its status; under torchrun, @record writes a rank's error file."""
    from torch.distributed.elastic.multiprocessing.errors import record

    if spare_dir is not None:
        code = record(serve_spare_job)(spare_dir)
    else:
        code = serve_spare() if spare else record(run_worker)(run_dir, config_json)
    # Every file is written and closed: skip the interpreter's teardown, which takes a second or more
    # with torch loaded and would delay the run's end (and the next queued run) by as much.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

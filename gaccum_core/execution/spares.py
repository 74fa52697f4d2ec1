"""What a process runner keeps warm so that Start → first point stays short, and for how long.

A warm spare worker (torch, the engine and the default data loaded, then it says it is ready) is handed
the next single-process run; a new one warms when that run ends. It costs one process's memory and no
GPU (it creates no CUDA context), so it is kept for as long as the runner. A warm torchrun job is started
when a page sets N > 1 and handed the next run with that N; its ranks hold a process each (and on a GPU
machine a CUDA context each), so a job nobody asked for in idle_limit_s (GACCUM_SPARE_IDLE_S on the
server, default 5 minutes) is ended, and the page's next ask starts another. Imports no torch: the
server starts its first spare before it imports torch itself.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gaccum_core.config import RunConfig
from gaccum_core.runs.store import RunStore
from gaccum_core.execution.supervisor import Child, Spare, kill_tree, spawn_spare, spawn_spare_job, terminate_on_exit

SPARE_IDLE_ENV = "GACCUM_SPARE_IDLE_S"
SPARE_IDLE_S = 300.0  # how long a warm torchrun job nobody asks for is kept, by default
_WATCH_MAX_S = 60.0  # the longest the idle watcher sleeps between looks (and an "inf" limit is looked at)
# The longest a page's Start waits for a spare still warming: past it (a machine so loaded that importing torch
# takes this long), Start is enabled and a run waits for the spare instead.
WARM_GATE_S = 30.0


def idle_limit(text: str | None) -> float:
    """The idle limit GACCUM_SPARE_IDLE_S sets (seconds, > 0; "inf" keeps a job for good); the default when unset.
    ValueError naming the variable, its value and what it takes."""
    if text is None or not text.strip():
        return SPARE_IDLE_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds > 0:  # NaN too
        raise ValueError(f"{SPARE_IDLE_ENV}={text!r} is not allowed: a number of seconds above 0 (or inf to keep "
                         f"a warm torchrun job for good); unset, {SPARE_IDLE_S:g}")
    return seconds


class SpareWorker:
    """The warm spare worker a process runner keeps: a run is handed to it, then the next one warms up.

    keep=False keeps none (a one-run CLI, the thread executor): each run gets a fresh worker. first: a spare
    already started (the server starts one before it imports torch), kept as this one's first."""

    def __init__(self, keep: bool, first: Spare | None = None) -> None:
        self._keep, self._lock = keep, threading.Lock()
        self._spare: Spare | None = first if first is not None else spawn_spare() if keep else None

    @property
    def pid(self) -> int | None:
        """The waiting spare's process id (it may have died since), or None when none waits."""
        with self._lock:
            return self._spare.proc.pid if self._spare is not None else None

    def warming(self) -> bool:
        """Whether the waiting spare is still importing and loading (a run handed to it now would wait for that),
        for at most WARM_GATE_S after it was started."""
        with self._lock:
            spare = self._spare
        return (spare is not None and not spare.ready.is_set()
                and time.monotonic() - spare.started < WARM_GATE_S)

    def hand_over(self, store: RunStore, run_id: str) -> Child:
        """Give the run to the spare; to a fresh worker when there is none or it died."""
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            try:
                return Child.hand_over(spare.proc, store, run_id)
            except OSError:  # it died while waiting (killed, out of memory): its pipe is broken
                kill_tree(spare.proc)
        return Child.hand_over(spawn_spare().proc, store, run_id)

    def refill(self) -> None:
        """Start warming the next spare, unless none is kept (or close() was called)."""
        with self._lock:
            if self._keep and self._spare is None:
                self._spare = spawn_spare()

    def close(self) -> None:
        """Keep no spare from now on; the waiting one exits on its own."""
        with self._lock:
            spare, self._spare, self._keep = self._spare, None, False
        if spare is not None:
            terminate_on_exit(spare.proc)


@dataclass(frozen=True)
class _Job:
    proc: subprocess.Popen
    nproc: int
    spare_dir: Path


class SpareJob:
    """A warm torchrun job for the data-parallel run about to start: prepared when a page sets N > 1 on
    one machine, taken by the next run with that N (a run with another N starts its own torchrun), ended
    once nobody has asked for it (prepare) for idle_limit_s.

    keep=False keeps none. Its ranks exit on their own when the server goes; a replaced, idle or closed job
    is killed with every rank it started. clock: where idle time is read (tests move it by hand)."""

    def __init__(self, keep: bool, idle_limit_s: float = SPARE_IDLE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._keep, self.idle_limit_s, self._clock = keep, idle_limit_s, clock
        self._changed = threading.Condition()
        self._job: _Job | None = None
        self._asked = 0.0  # when a page last asked for the waiting job (clock())
        self._watcher: threading.Thread | None = None

    def prepare(self, config: RunConfig) -> None:
        """Warm a job for config's N ranks on this machine, unless one waits already (N ≤ 1: none); either way
        the waiting job's idle time starts again."""
        wanted = config.nproc if self._keep and config.nnodes == 1 and config.world_size > 1 else 0
        with self._changed:
            job, self._asked = self._job, self._clock()
            if job is not None and job.nproc == wanted and job.proc.poll() is None:
                return
            self._job = None
            if wanted:
                spare_dir = Path(tempfile.mkdtemp(prefix="gaccum-spare-job-"))
                self._job = _Job(spawn_spare_job(config, spare_dir), wanted, spare_dir)
                self._watch()
            self._changed.notify_all()  # the watcher looks again: a job gone, or a new one's idle time
        if job is not None:
            _discard(job)

    def waiting(self) -> tuple[int, float] | None:
        """The waiting job's rank count and how long nobody has asked for it (seconds); None when none waits."""
        with self._changed:
            job = self._job
            return (job.nproc, self._clock() - self._asked) if job is not None else None

    def take(self, store: RunStore, run_id: str, config: RunConfig) -> Child | None:
        """The waiting job, given this run, when it has config's N ranks and still lives; else None."""
        job = self._let_go()
        if job is None:
            return None
        if config.nnodes != 1 or job.nproc != config.nproc or job.proc.poll() is not None:
            _discard(job)
            return None
        return Child.hand_over_job(job.proc, job.spare_dir, store, run_id)

    def close(self) -> None:
        """Keep no job from now on; kill the waiting one."""
        with self._changed:
            self._keep = False
        job = self._let_go()
        if job is not None:
            _discard(job)

    def _let_go(self) -> _Job | None:
        """The waiting job, no longer kept (its idle watcher ends)."""
        with self._changed:
            job, self._job = self._job, None
            self._changed.notify_all()
        return job

    def _watch(self) -> None:
        """Start the idle watcher unless it runs (called holding the condition's lock)."""
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._end_when_idle, name="gaccum-spare-job-idle", daemon=True)
            self._watcher.start()

    def _end_when_idle(self) -> None:
        """While a job waits: end it once nobody has asked for it for idle_limit_s."""
        with self._changed:
            while self._job is not None:
                left = self.idle_limit_s - (self._clock() - self._asked)
                if left <= 0:
                    break
                self._changed.wait(min(left, _WATCH_MAX_S))
            job, self._job, self._watcher = self._job, None, None
        if job is not None:
            _discard(job)


def _discard(job: _Job) -> None:
    """Kill a job nobody will use and remove its directory."""
    kill_tree(job.proc)
    shutil.rmtree(job.spare_dir, ignore_errors=True)


def _duration(seconds: float) -> str:
    """'40 s', '3 min', '0.5 s': how long, in the unit a person reads."""
    if seconds >= 90:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.2g} s"


def warm_words(worker: SpareWorker, job: SpareJob) -> str:
    """What waits warm, e.g. 'warm: a 1-process worker; a 2-rank torchrun job, idle 3 min, ends after 5 min
    idle'; '' when nothing does."""
    parts = []
    if worker.pid is not None:
        parts.append("a 1-process worker" + (" (warming up: importing torch)" if worker.warming() else ""))
    waiting = job.waiting()
    if waiting is not None:
        ranks, idle_s = waiting
        ends = "" if math.isinf(job.idle_limit_s) else f", ends after {_duration(job.idle_limit_s)} idle"
        parts.append(f"a {ranks}-rank torchrun job, idle {_duration(idle_s)}{ends}")
    return "warm: " + "; ".join(parts) if parts else ""

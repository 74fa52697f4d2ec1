"""A run the runner tracks in memory, and the snapshot of it a UI or CLI polls.

The runner's threads change a TrackedRun only under the runner's lock; snapshot() copies it under the
same lock into a frozen RunSnapshot, so a page can poll every second without reading files.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gaccum_core.config import RunConfig
from gaccum_core.runs.store import known_settings
from gaccum_core.states import FINAL_STATES, RunState
from gaccum_core.train.metrics import RowKeeper, eta_seconds

if TYPE_CHECKING:
    from gaccum_core.runs.store import RunStore


@dataclass(frozen=True)
class RunSnapshot:
    """A consistent copy of one run's state."""

    run_id: str
    config: RunConfig
    state: RunState
    message: str
    device: str
    steps_done: int
    total_steps: int
    queue_position: int
    elapsed_s: float
    eta_s: float | None
    metrics: tuple[Mapping[str, Any], ...]  # read-only rows: copy one to change it
    evals: tuple[Mapping[str, Any], ...]
    name: str = ""  # the user's name for the run, if they gave one
    known: frozenset[str] | None = None  # an imported run's settings its hparams named (None: a run of gaccum's)
    devices: tuple[str, ...] = ()  # what it holds in the device queue while it runs ("cuda:0", "cuda:1"; "cpu")
    waiting_for: str = ""  # while queued, what it waits for first: 'run baseline on cuda:0', 'a plan on cuda:1'

    @property
    def done(self) -> bool:
        """True once the run has ended (finished, stopped, failed or diverged)."""
        return self.state in FINAL_STATES


@dataclass
class TrackedRun:
    """One run's state in the runner's memory; read and changed only under the runner's lock."""

    run_id: str
    config: RunConfig
    devices: tuple[str, ...]  # every device it uses, held together in the runner's device queue (device_queue)
    # The rows the run logged, appended under the runner's lock. Each is read-only, so snapshots share
    # them: copying every row on every poll would cost a live page O(steps) per second.
    rows: RowKeeper
    name: str = ""
    state: RunState = RunState.QUEUED
    message: str = ""
    device: str = ""
    total_steps: int = 0
    started: float | None = None
    ended: float | None = None
    pid: int | None = None  # the worker process (or torchrun) running it, if any
    stop_event: threading.Event = field(default_factory=threading.Event)
    done_event: threading.Event = field(default_factory=threading.Event)

    def snapshot(self, queue_position: int, waiting_for: str = "") -> RunSnapshot:
        """A copy of the run's state (call with the runner's lock held); queue_position 0 when not queued."""
        elapsed = (self.ended or time.monotonic()) - self.started if self.started else 0.0
        steps_done = len(self.rows.steps)
        eta = eta_seconds(self.rows.steps, self.total_steps) if self.state == RunState.RUNNING else None
        return RunSnapshot(self.run_id, self.config, self.state, self.message, self.device, steps_done,
                           self.total_steps, queue_position, elapsed, eta, tuple(self.rows.steps),
                           tuple(self.rows.evals), self.name, devices=self.devices, waiting_for=waiting_for)


def disk_snapshot(store: RunStore, run_id: str) -> RunSnapshot:
    """A snapshot of a run from its files (a run this runner does not track: earlier servers', other
    command lines'): its config, status and rows. OSError, StoreError or ValueError when it cannot be read."""
    status = store.read_status(run_id)
    steps, evals = store.metric_rows(run_id), store.eval_rows(run_id)
    return RunSnapshot(run_id, store.read_config(run_id), RunState(status.get("state", RunState.FAILED)),
                       status.get("message", ""), status.get("device", ""), len(steps),
                       int(status.get("total_steps") or len(steps)), 0, 0.0, None, tuple(steps), tuple(evals),
                       status.get("name", ""), known_settings(status))

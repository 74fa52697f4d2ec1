"""The background runner: runs execute in worker threads, one at a time per device; later runs queue.

States (gaccum_core.states): queued -> running -> finished | stopped | failed | diverged. Every run
that starts ends in one of the final states with a message, whatever raises and wherever. The
training thread only touches plain Python state under a lock; snapshot() copies it for a UI or CLI
to poll without reading files.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from gaccum_core.config import RunConfig
from gaccum_core.device import device_name, resolve_device
from gaccum_core.engine import CompileError, Diverged, Engine
from gaccum_core.memory import clear_cache, is_out_of_memory
from gaccum_core.metrics import FanOut, Row, eta_seconds, skipped_warning
from gaccum_core.states import FINAL_STATES, RunState
from gaccum_core.store import RunStore, now_iso


class RunBusyError(RuntimeError):
    """The run is queued or running: it cannot be deleted now."""


def failure_message(exc: BaseException, config: RunConfig) -> str:
    """A one-paragraph explanation of why a run failed, with advice where there is some."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if is_out_of_memory(exc):
        b, k = config.micro_batch_size, config.accum_steps
        advice = (f"lower the micro-batch size and raise accumulation steps to keep the effective batch "
                  f"of {b * k}, e.g. micro_batch_size={max(b // 2, 1)} with accum_steps={k * 2}")
        return f"out of memory at micro_batch_size={b}: {advice}. ({text[:200]})"
    if isinstance(exc, (ValueError, CompileError)):
        return text
    return f"{type(exc).__name__}: {text[:300]}"


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

    @property
    def done(self) -> bool:
        """True once the run has ended (finished, stopped, failed or diverged)."""
        return self.state in FINAL_STATES


@dataclass
class _Run:
    run_id: str
    config: RunConfig
    device_key: str
    name: str = ""
    state: RunState = RunState.QUEUED
    message: str = ""
    device: str = ""
    total_steps: int = 0
    started: float | None = None
    ended: float | None = None
    metrics: list[Row] = field(default_factory=list)
    evals: list[Row] = field(default_factory=list)
    stop_event: threading.Event = field(default_factory=threading.Event)
    done_event: threading.Event = field(default_factory=threading.Event)


class _MemorySink:
    """Keeps rows in the run's in-memory state for snapshot(), each a read-only copy: snapshots share
    them (copying every row on every poll would cost a live page O(steps) per second)."""

    def __init__(self, run: _Run, lock: threading.Lock) -> None:
        self.run, self.lock = run, lock

    def log_step(self, row: Row) -> None:
        """Keep the step row."""
        with self.lock:
            self.run.metrics.append(MappingProxyType(dict(row)))

    def log_eval(self, row: Row) -> None:
        """Keep the eval row."""
        with self.lock:
            self.run.evals.append(MappingProxyType(dict(row)))


class Runner:
    """Runs configs in background threads and tracks them; one instance per server process."""

    def __init__(self, runs_dir: str = "runs") -> None:
        self.store = RunStore(runs_dir)
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}
        self._queues: dict[str, deque[_Run]] = {}
        self._workers: dict[str, threading.Thread] = {}

    def submit(self, config: RunConfig, name: str | None = None) -> str:
        """Create the run on disk and queue it; returns the run id."""
        device_key = str(resolve_device(config.device))
        run_id = self.store.create(config, name)
        run = _Run(run_id, config, device_key, name or "")
        with self._lock:
            self._runs[run_id] = run
            self._queues.setdefault(device_key, deque()).append(run)
            worker = self._workers.get(device_key)
            if worker is None or not worker.is_alive():
                worker = threading.Thread(target=self._work, args=(device_key,), name=f"gaccum-{device_key}",
                                          daemon=True)
                self._workers[device_key] = worker
                worker.start()
        return run_id

    def stop(self, run_id: str) -> None:
        """Ask a run to stop: a queued run never starts, a running one stops within one micro-batch."""
        with self._lock:
            run = self._runs[run_id]
            run.stop_event.set()
            queue = self._queues.get(run.device_key, deque())
            if run in queue:
                queue.remove(run)
                self._finish(run, RunState.STOPPED, "stopped before it started")

    def delete(self, run_id: str) -> None:
        """Delete a run's directory and forget it, for every session; a run still going is refused."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None and run.state not in FINAL_STATES:
                raise RunBusyError(f"run {run_id} is {run.state}: stop it before deleting it")
            self.store.delete(run_id)
            self._runs.pop(run_id, None)

    def active_ids(self) -> tuple[str, ...]:
        """The runs queued or running, in submission order: cheap enough to poll every second."""
        with self._lock:
            return tuple(run.run_id for run in self._runs.values() if run.state not in FINAL_STATES)

    def config(self, run_id: str) -> RunConfig:
        """A run's settings (KeyError for a run this runner does not know)."""
        with self._lock:
            return self._runs[run_id].config

    def knows(self, run_id: str) -> bool:
        """Whether this runner tracks the run (it started it here and nobody deleted it since)."""
        with self._lock:
            return run_id in self._runs

    def snapshot(self, run_id: str) -> RunSnapshot:
        """A copy of one run's state."""
        with self._lock:
            return self._snapshot(self._runs[run_id])

    def snapshots(self) -> list[RunSnapshot]:
        """Copies of every run this runner has seen, in submission order."""
        with self._lock:
            return [self._snapshot(run) for run in self._runs.values()]

    def wait(self, run_id: str, timeout: float | None = None) -> RunSnapshot:
        """Block until the run ends (or the timeout passes) and return its snapshot."""
        self._runs[run_id].done_event.wait(timeout)
        return self.snapshot(run_id)

    def _snapshot(self, run: _Run) -> RunSnapshot:
        now = run.ended or time.monotonic()
        elapsed = now - run.started if run.started else 0.0
        queue = self._queues.get(run.device_key, deque())
        position = queue.index(run) + 1 if run in queue else 0
        eta = eta_seconds(len(run.metrics), run.total_steps, elapsed) if run.state == RunState.RUNNING else None
        return RunSnapshot(run.run_id, run.config, run.state, run.message, run.device, len(run.metrics),
                           run.total_steps, position, elapsed, eta, tuple(run.metrics), tuple(run.evals), run.name)

    def _work(self, device_key: str) -> None:
        while (run := self._next(device_key)) is not None:
            try:
                state, message = self._execute(run)
            except Exception as exc:  # a fault outside the engine (cleanup, disk): the run still ends
                state, message = RunState.FAILED, f"the runner failed: {type(exc).__name__}: {exc}"
            except BaseException as exc:  # SystemExit and the like end the thread, never silently;
                with self._lock:  # runs still queued wait for the next submit() to start a worker
                    self._finish(run, RunState.FAILED, f"the runner stopped: {type(exc).__name__}")
                    self._workers.pop(device_key, None)
                raise
            with self._lock:
                self._finish(run, state, message)

    def _next(self, device_key: str) -> _Run | None:
        """The next queued run, marked running; None (and this worker gone) when the queue is empty."""
        with self._lock:
            queue = self._queues[device_key]
            if not queue:
                # Leave under the lock, so submit() sees this worker gone and starts another.
                del self._workers[device_key]
                return None
            run = queue.popleft()
            run.state, run.started = RunState.RUNNING, time.monotonic()
            return run

    def _execute(self, run: _Run) -> tuple[RunState, str]:
        """Train one run and release its memory; its final state and message."""
        device = torch.device(run.device_key)
        run.device = device_name(device)
        writer, engine = None, None
        try:
            self.store.update_status(run.run_id, state=RunState.RUNNING, started=now_iso(), device=run.device)
            writer = self.store.writer(run.run_id)
            engine = Engine(run.config, device)
            with self._lock:
                run.total_steps = engine.total_steps
            state = engine.run(FanOut(writer, _MemorySink(run, self._lock)), run.stop_event.is_set)
            self.store.save_model(run.run_id, engine.model.state_dict())
            warning = skipped_warning(run.metrics)
            outcome = state, "stopped by the user" if state == RunState.STOPPED else warning
        except Diverged as exc:
            outcome = RunState.DIVERGED, str(exc)
        except Exception as exc:  # every failure ends the run with a message, never a dead thread
            outcome = RunState.FAILED, failure_message(exc, run.config)
            self.store.write_traceback(run.run_id, traceback.format_exc())
        finally:
            if writer is not None:
                writer.close()
            del engine
        return self._release(run, device, *outcome)

    def _release(self, run: _Run, device: torch.device, state: RunState, message: str) -> tuple[RunState, str]:
        """Free the run's memory; a failure to do so fails the run, whose last steps are then suspect."""
        try:
            clear_cache(device)
        except Exception as exc:
            # A device error surfaces at the next synchronisation, which may be this one.
            self.store.write_traceback(run.run_id, traceback.format_exc())
            before = f"it had {state}" + (f" ({message})" if message else "")
            return RunState.FAILED, (f"releasing {run.device}'s memory after the run failed: {type(exc).__name__}: "
                                     f"{str(exc)[:300]}; {before}. Device errors surface late, so its last steps "
                                     "may be wrong: restart the server if the next run fails too")
        return state, message

    def _finish(self, run: _Run, state: RunState, message: str) -> None:
        """Record the final state in memory, then on disk (called with the lock held); never raises."""
        run.state, run.message, run.ended = state, message, time.monotonic()
        try:
            self.store.update_status(run.run_id, state=state, message=message, ended=now_iso())
        except Exception as exc:  # the run directory was deleted or the disk is full: memory still says it
            run.message = f"{message} (status.json not updated: {type(exc).__name__}: {exc})".lstrip()
        finally:
            run.done_event.set()

"""The background runner: runs execute one at a time per device; later runs queue.

A run holds every device it uses (a data-parallel job on CUDA: one GPU per rank) and waits for all of them, in the
order runs were submitted (gaccum_core.execution.device_queue); a page's plan on a GPU takes its turn the same way (turn).

A run trains in a worker process (executor "process": a warm spare worker, or torchrun for a
data-parallel run) supervised by the device's thread here, which follows the rows it writes, or in
that thread itself (executor "thread"): gaccum_core.execution.executors. States (gaccum_core.states):
queued -> running -> finished | stopped | failed | diverged. Every run that starts ends in one of the
final states with a message, whatever raises and wherever, whichever executor ran it. The supervising
thread only touches plain Python state under a lock; snapshot() copies it for a UI or CLI to poll
without reading files.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import MappingProxyType

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.runs.catalog import forget_runs, index_runs
from gaccum_core.runs.claim import Claim, RunBusyError, describe_process, training_pid
from gaccum_core.execution.device_queue import DeviceQueue, Turn, devices_of
from gaccum_core.runs.integrity import read_run
from gaccum_core.execution.executors import EXECUTORS, distributed, keep_job_logs, supervise, train_here
from gaccum_core.execution.resume import prepare_resume
from gaccum_core.execution.snapshot import RunSnapshot, TrackedRun
from gaccum_core.execution.spares import SPARE_IDLE_S, SpareJob, SpareWorker, warm_words
from gaccum_core.runs.store import RunStore, now_iso
from gaccum_core.execution.supervisor import Child, Launch, Spare
from gaccum_core.states import FINAL_STATES, Outcome, RunState
from gaccum_core.train.checkpoint import CheckpointError
from gaccum_core.train.device import resolve_device
from gaccum_core.train.metrics import RowKeeper
from gaccum_core.usercode import check_config, runs_here, user_code_fields

STOP_GRACE_S = 5.0  # a worker that has not stopped this long after the request is killed


__all__ = ["Runner", "RunBusyError", "STOP_GRACE_S"]


class Runner:
    """Runs configs in the background and tracks them; one instance per server process.

    executor "process" trains each run in a worker process and keeps one warm spare worker ready
    (started now, so the first Start does not wait for torch to import; warm_spare=False starts a
    worker per run instead, for a one-run CLI; first_spare: one the server started before it imported
    torch); "thread" trains in this process. A data-parallel run (config.world_size > 1) always runs under
    torchrun; a warm torchrun job prepared for one is ended after spare_idle_s unasked (gaccum_core.execution.spares).
    confined: the dashboard's runner, which starts only runs whose own code is found in GACCUM_USER_CODE, and
    only in worker processes (check_user_code).
    """

    def __init__(self, runs_dir: str = "runs", executor: str = "thread", stop_grace_s: float = STOP_GRACE_S,
                 launch: Launch = Launch(), warm_spare: bool = True, confined: bool = False,
                 spare_idle_s: float = SPARE_IDLE_S, first_spare: Spare | None = None) -> None:
        if executor not in EXECUTORS:
            raise ValueError(f"executor={executor!r} is not allowed: one of {', '.join(EXECUTORS)}")
        self.store = RunStore(runs_dir)
        self.executor, self.stop_grace_s, self.launch = executor, stop_grace_s, launch
        self.warm_spare = warm_spare and executor == "process"
        self.confined = confined
        self._lock = threading.Lock()
        self._runs: dict[str, TrackedRun] = {}
        self._claims: dict[str, Claim] = {}  # the runs this runner owns until they end
        self._notes: dict[str, str] = {}  # what a resume found, said again in the run's final message
        self._queue: DeviceQueue[TrackedRun | Turn] = DeviceQueue()
        self._spare = SpareWorker(keep=self.warm_spare, first=first_spare)
        self._spare_job = SpareJob(keep=self.warm_spare, idle_limit_s=spare_idle_s)
        atexit.register(self.close)

    def submit(self, config: RunConfig, name: str | None = None, plan: dict | None = None,
               tags: tuple[str, ...] = ()) -> str:
        """Create the run on disk (with the plan that chose its micro-batch, if any, and its tags) and queue
        it; returns the run id. ConfigError when it names your own code that may not run (check_user_code)."""
        self.check_user_code(config)
        run_id = self.store.create(config, name, plan)
        self._claims[run_id] = Claim(self.store.path(run_id))  # a new directory: nobody else knows it yet
        if tags:  # before it is queued: a starting run removes the temporary files of atomic writes
            self.store.write_tags(run_id, tags)
        self._enqueue(self._track(run_id, config, name or ""))
        return run_id

    def resume(self, run_id: str, epochs: int | None = None, max_steps: int | None = None, again: bool = False) -> str:
        """Queue a stopped, interrupted or failed run to go on from its checkpoint, in its directory; a
        finished one with a longer epochs or max_steps. CheckpointError says why a run cannot resume.
        again: a run that has no checkpoint.pt yet (killed or stopped before its first) trains again from its
        first step in its own directory, its rows dropped (a sweep's rerun of such a run)."""
        with self._lock:
            known = self._runs.get(run_id)
            if known is not None and known.state not in FINAL_STATES:
                raise RunBusyError(f"run {run_id} is {known.state}: it cannot be resumed while it goes on")
        run_dir = self.store.path(run_id)
        if not run_dir.is_dir():
            raise FileNotFoundError(2, "No such file or directory", str(run_dir))
        claim = Claim(run_dir)  # before anything is read or written: a second resume is refused here
        try:
            run = self._prepare_resume(run_id, epochs, max_steps, again)
        except BaseException:
            claim.release()
            raise
        self._claims[run_id] = claim
        self._enqueue(run)
        return run_id

    def _prepare_resume(self, run_id: str, epochs: int | None, max_steps: int | None, again: bool) -> TrackedRun:
        """Check that the claimed run can go on, then cut its rows back to its checkpoint: the run to queue."""
        files = read_run(self.store, run_id)  # DamagedRun naming the file a hand or a full disk damaged
        config, status = files.config, files.status
        try:
            self.check_user_code(config)
        except ConfigError as exc:
            raise CheckpointError(f"run {run_id} cannot go on from here: {exc}") from None
        if config.nnodes > 1 and not self.launch.rdzv_endpoint:
            raise CheckpointError(f"run {run_id} trained on {config.nnodes} machines: resuming it needs every node's "
                                  "ranks at a rendezvous, which resume cannot start; start it again with run")
        if status["state"] not in FINAL_STATES and training_pid(status.get("pid")):
            # Unclaimed, yet its worker goes on: its runner died and it stops at its next micro-batch.
            raise RunBusyError(f"run {run_id} is still training in {describe_process(status['pid'])}: "
                               "wait for it to stop, or stop it there")
        longer, step = prepare_resume(self.store, run_id, config, status, epochs, max_steps, again)
        self.store.clear_stop_request(run_id)
        run = self._track(run_id, longer, status.get("name", ""))
        # The rows up to the checkpoint, shown until it goes on: fresh dicts no one else holds, in a run
        # no other thread sees yet, so wrapped read-only as they are.
        run.rows.steps.extend(MappingProxyType(row) for row in self.store.metric_rows(run_id))
        run.rows.evals.extend(MappingProxyType(row) for row in self.store.eval_rows(run_id))
        run.message = self._notes[run_id] = _missing_rows(run.rows.steps, step)
        self.store.update_status(run_id, state=RunState.QUEUED, message=run.message)
        return run

    def _track(self, run_id: str, config: RunConfig, name: str) -> TrackedRun:
        """A queued run to track, on the devices its config uses, its rows kept under the lock."""
        return TrackedRun(run_id, config, devices_of(config, resolve_device(config.device)), RowKeeper(self._lock),
                          name)

    def _enqueue(self, run: TrackedRun) -> None:
        with self._lock:
            self._runs[run.run_id] = run
            self._queue.add(run)
            self._dispatch()

    def _dispatch(self) -> None:
        """Start what the device queue admits now (called with the lock held): a run in a thread of its own, a
        turn by waking whoever waits for it."""
        for item in self._queue.admit():
            if isinstance(item, Turn):
                item.given.set()
                continue
            item.state, item.started = RunState.RUNNING, time.monotonic()
            threading.Thread(target=self._work, args=(item,), name=f"gaccum-{','.join(item.devices)}",
                             daemon=True).start()

    @contextmanager
    def turn(self, devices: tuple[str, ...], waiting: Callable[[str], None] | None = None,
             poll_s: float = 0.5) -> Iterator[None]:
        """Hold these devices in the device queue for the with block (a page's plan measuring on a GPU): first wait
        for the runs and turns ahead of it, calling waiting('run <name> on cuda:0') every poll_s meanwhile; a run
        submitted while the block goes on waits for it to end."""
        mine = Turn(tuple(devices))
        with self._lock:
            self._queue.add(mine)
            self._dispatch()
        try:
            while not mine.given.wait(poll_s):
                if waiting is not None:
                    waiting(self._blocker_words(mine))
            yield
        finally:
            with self._lock:
                if not self._queue.remove(mine):
                    self._queue.release(mine)
                self._dispatch()

    def _blocker_words(self, mine: Turn) -> str:
        """What a waiting turn waits for, e.g. 'run baseline on cuda:0'."""
        with self._lock:
            return self._waiting_for(mine) or "its turn"

    def _waiting_for(self, item: TrackedRun | Turn) -> str:
        """What a queued run or turn waits for first ('run baseline on cuda:0', 'a plan on cuda:1'), '' when it
        does not wait (call with the lock held)."""
        found = self._queue.blocker(item)
        if found is None:
            return ""
        other, shared = found
        what = "a plan" if isinstance(other, Turn) else f"run {other.name or other.run_id}"
        return f"{what} on {', '.join(shared)}"

    def stop(self, run_id: str) -> None:
        """Ask a run to stop: a queued run never starts, a running one stops within one micro-batch."""
        with self._lock:
            run = self._runs[run_id]
            run.stop_event.set()
            if self._queue.remove(run):
                self._finish(run, RunState.STOPPED, "stopped before it started")
                self._dispatch()  # the devices it reserved may let a later run start

    def abandon(self, run_id: str, message: str) -> None:
        """Mark a run stopped now, on disk too, without waiting for its thread (the process is about to
        exit: a second Ctrl-C); a run already ended is left as it ended."""
        with self._lock:
            run = self._runs[run_id]
            run.stop_event.set()
            self._queue.remove(run)  # a queued run never starts
            if run.state not in FINAL_STATES:
                self._finish(run, RunState.STOPPED, message)

    def delete(self, run_id: str) -> None:
        """Delete a run's directory and forget it, for every session; a run still going is refused."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None and run.state not in FINAL_STATES:
                raise RunBusyError(f"run {run_id} is {run.state}: stop it before deleting it")
            run_dir = self.store.path(run_id)
            with Claim(run_dir):  # refused while another server or command line owns it
                pid = self._status_pid(run_id)
                if training_pid(pid):
                    raise RunBusyError(f"run {run_id} is still training in {describe_process(pid)}: "
                                       "stop it before deleting it")
                self.store.delete(run_id)
            forget_runs(self.store, [run_id])
            self._runs.pop(run_id, None)

    def _status_pid(self, run_id: str) -> object:
        """The pid status.json names for a run on disk as not ended; None when it ended or does not parse
        (a damaged run can always be deleted)."""
        try:
            status = self.store.read_status(run_id)
        except (OSError, ValueError):
            return None
        if not isinstance(status, dict) or status.get("state") in FINAL_STATES:
            return None
        return status.get("pid")

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

    def _snapshot(self, run: TrackedRun) -> RunSnapshot:
        return run.snapshot(self._queue.position(run), self._waiting_for(run))

    def worker_pid(self, run_id: str) -> int | None:
        """The process id of the worker (or torchrun) that runs or last ran the run; None for a run not
        yet started or trained in this process (KeyError for a run this runner does not know)."""
        with self._lock:
            return self._runs[run_id].pid

    @property
    def spare_pid(self) -> int | None:
        """The process id of the warm spare worker waiting for the next run (it may have died since);
        None when no spare is kept (executor "thread", warm_spare=False, after close())."""
        return self._spare.pid

    def spare_warming(self) -> bool:
        """Whether the warm spare worker is still importing torch and loading the default data: a single-process
        run started now would wait for it (the Train page keeps Start disabled meanwhile, for at most
        spares.WARM_GATE_S)."""
        return self._spare.warming()

    def warm_text(self) -> str:
        """What waits warm for the next run, e.g. 'warm: a 1-process worker; a 2-rank torchrun job, idle 3 min,
        ends after 5 min idle'; '' when nothing does (the thread executor, a run using the spare)."""
        return warm_words(self._spare, self._spare_job)

    def _work(self, run: TrackedRun) -> None:
        """Train one admitted run in this thread, then give its devices to what waits for them."""
        try:
            state, message = self._execute(run)
        except Exception as exc:  # a fault outside the engine (cleanup, disk): the run still ends
            state, message = RunState.FAILED, f"the runner failed: {type(exc).__name__}: {exc}"
        except BaseException as exc:  # SystemExit and the like end the thread, never silently
            self._end(run, RunState.FAILED, f"the runner stopped: {type(exc).__name__}")
            raise
        self._end(run, state, message)

    def _end(self, run: TrackedRun, state: RunState, message: str) -> None:
        """Record the run's end, free its devices and start what waited for them."""
        with self._lock:
            self._finish(run, state, message)
            self._queue.release(run)
            self._dispatch()

    def _execute(self, run: TrackedRun) -> Outcome:
        """Train one run in this thread or in a worker process; its final state and message."""
        if self.executor == "thread" and not distributed(run.config):
            return train_here(self.store, run, self._lock)
        if distributed(run.config):
            child = (self._spare_job.take(self.store, run.run_id, run.config)
                     or Child.torchrun(self.store, run.run_id, run.config, self.launch))
        else:
            child = self._spare.hand_over(self.store, run.run_id)
        try:
            return supervise(child, run, self._lock, self.stop_grace_s)
        finally:
            if distributed(run.config):
                keep_job_logs(child, self.store, run.run_id)
            else:
                self._spare.refill()  # the next run finds a warm worker again

    def check_user_code(self, config: RunConfig) -> None:
        """Where your own code may not run (the dashboard's runner, or a page's thread): each name of it found
        in the folder GACCUM_USER_CODE names, read and not imported (usercode.check_named), and a worker
        process to import it in. Anywhere else (the command line) nothing to check here."""
        if not self.confined and runs_here():
            return
        check_config(config)
        mine = user_code_fields(config)
        if mine and self.executor == "thread" and not distributed(config):
            raise ConfigError(*mine[0], "a run in a worker process: GACCUM_EXECUTOR=thread trains in the dashboard's "
                              "server, which never runs your code")

    def prepare(self, config: RunConfig) -> None:
        """Get ready for a run of these settings before it is submitted: for a data-parallel run on this
        machine, a torchrun job whose ranks warm up now (the page calls this when N > 1 is set and no run
        goes; N ≤ 1 lets a waiting job go). Nothing with the thread executor or warm_spare=False."""
        self._spare_job.prepare(config)

    def close(self) -> None:
        """Stop keeping a spare worker or job (runs in progress go on; the spare exits on its own)."""
        self._spare.close()
        self._spare_job.close()

    def _finish(self, run: TrackedRun, state: RunState, message: str) -> None:
        """Record the final state in memory, then on disk (called with the lock held); never raises."""
        message = "; ".join(m for m in (message, self._notes.pop(run.run_id, "")) if m)
        run.state, run.message, run.ended = state, message, time.monotonic()
        try:
            self.store.update_status(run.run_id, state=state, message=message, ended=now_iso())
        except Exception as exc:  # the run directory was deleted or the disk is full: memory still says it
            run.message = f"{message} (status.json not updated: {type(exc).__name__}: {exc})".lstrip()
        else:
            self._index(run.run_id)
        finally:
            claim = self._claims.pop(run.run_id, None)
            if claim is not None:
                claim.release()  # after the final state is on disk: a resume elsewhere reads it
            run.done_event.set()

    def _index(self, run_id: str) -> None:
        """Put a run's final row in the runs index, so that the next listing, in any process, reads none of its
        files. The index is a cache: where it fails, that listing reads them."""
        try:
            index_runs(self.store, [run_id])
        except Exception:  # noqa: BLE001 - _finish never raises, and the run's files hold all the index would
            pass


def _missing_rows(rows: list, step: int) -> str:
    """What the run's message says of steps up to its checkpoint's that metrics.csv lacks (a last row a kill cut
    short, which resume drops); '' when every one has its row."""
    last = rows[-1]["step"] if rows else 0
    if last >= step:
        return ""
    gap = f"the rows go from step {last} to {step + 1}"
    if last + 1 == step:
        return f"step {step}'s row in metrics.csv was cut short (a kill while it was written) and is dropped: {gap}"
    return f"metrics.csv lacks the rows of steps {last + 1} to {step}: {gap}"

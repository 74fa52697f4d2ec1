"""A sweep going: its runs handed to the runner lane by lane (one at a time per lane: one lane on the CPU,
one per GPU), runs already done skipped, a killed run resumed from its checkpoint (or, killed before its
first one, trained again in place of its directory), the summary written at the end. The job claims the
sweep's folder while it goes, as a runner claims a run: the same sweep started again elsewhere is refused.
The CLI and the Sweeps page poll progress(); nothing here draws."""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass

from gaccum_core.runs.claim import Claim, RunBusyError
from gaccum_core.execution.runner import Runner
from gaccum_core.execution.snapshot import RunSnapshot
from gaccum_core.states import FINAL_STATES, RunState
from gaccum_core.sweeps.devices import Lane, lanes
from gaccum_core.sweeps.files import sweep_dir, write_spec, write_summary
from gaccum_core.sweeps.members import DONE_STATES, RESUMABLE_STATES, Member, find_members
from gaccum_core.sweeps.spec import SweepRun, SweepSpec, sweep_runs, sweep_tag
from gaccum_core.sweeps.summary import Summary, summarize
from gaccum_core.train.checkpoint import CheckpointError


@dataclass(frozen=True)
class SweepProgress:
    """A copy of where a sweep stands: runs done (those skipped as done before it started included)."""

    sweep_id: str
    total: int
    skipped: int
    done: int
    failed: int
    current: tuple[RunSnapshot, ...]
    eta_s: float | None
    state: str  # running, finished (every run ended), stopped, failed
    message: str = ""

    @property
    def over(self) -> bool:
        """Whether the sweep has ended (its summary is written unless it failed)."""
        return self.state != "running"


class SweepJob:
    """Runs a sweep's runs through a runner in a background thread; start() returns at once."""

    def __init__(self, runner: Runner, spec: SweepSpec, gpus: int = 0) -> None:
        self.runner, self.spec, self.gpus = runner, spec, gpus
        self.sweep_id = spec.sweep_id
        self.runs = sweep_runs(spec)
        self.summary: Summary | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ended = threading.Event()
        self._current: dict[int, str] = {}  # lane → run id it trains
        self._durations: list[float] = []
        self._done_here, self._failed, self._skipped, self._todo = 0, 0, 0, 0
        self._parallel = 1
        self._state, self._message = "running", ""
        self._thread: threading.Thread | None = None
        self._claim: Claim | None = None

    def start(self) -> SweepJob:
        """Claim the sweep, write spec.json, find the runs already done, and start the rest in the background.
        RunBusyError naming the process when another server or command line runs this sweep now."""
        where = sweep_dir(self.runner.store.root, self.sweep_id)
        where.mkdir(parents=True, exist_ok=True)
        self._claim = Claim(where, f"sweep {self.sweep_id}")
        try:
            self._start()
        except BaseException:
            self._claim.release()
            raise
        return self

    def _start(self) -> None:
        write_spec(self.runner.store.root, self.spec)
        members = find_members(self.runner.store, self.sweep_id, self.runs)
        todo = [i for i, run in enumerate(self.runs) if not _done(members.get((run.cell, run.repeat)))]
        self._skipped, self._todo = len(self.runs) - len(todo), len(todo)
        phases = [[Lane(lane.device, tuple(todo[i] for i in lane.runs)) for lane in phase]
                  for phase in lanes([self.runs[i].config for i in todo], self.gpus)]
        self._parallel = max((len(phase) for phase in phases), default=1)
        self._thread = threading.Thread(target=self._main, args=(phases, members), name=f"sweep-{self.sweep_id}",
                                        daemon=True)
        self._thread.start()

    def _main(self, phases: list[list[Lane]], members: dict[tuple[int, int], Member]) -> None:
        try:
            for phase in phases:
                threads = [threading.Thread(target=self._lane, args=(n, lane, members), daemon=True)
                           for n, lane in enumerate(phase)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                if self._stop.is_set():
                    break
            self.summary = summarize(self.runner.store, self.spec)
            write_summary(self.runner.store.root, self.sweep_id, self.summary.table)
            state, message = "stopped" if self._stop.is_set() else "finished", None
        except Exception as exc:  # the disk, a run directory removed under it: the sweep still ends, said why
            state, message = "failed", f"{type(exc).__name__}: {exc}"
        self._claim.release()  # before it is over: a start that sees it over may claim the sweep again
        with self._lock:
            self._state = state
            self._message = self._message if message is None else message  # a run's failure stays said
        self._ended.set()

    def _lane(self, number: int, lane: Lane, members: dict[tuple[int, int], Member]) -> None:
        for index in lane.runs:
            if self._stop.is_set():
                return
            run = self.runs[index]
            try:
                state = self._train(number, run, members.get((run.cell, run.repeat)), lane.device)
            except Exception as exc:  # the runs directory cannot take the run: it counts as failed, said why
                state = RunState.FAILED
                with self._lock:
                    self._current.pop(number, None)
                    self._message = f"{run.name}: {type(exc).__name__}: {exc}"
            with self._lock:
                self._done_here += state in DONE_STATES
                self._failed += state is not None and state not in DONE_STATES and not self._stop.is_set()

    def _train(self, number: int, run: SweepRun, member: Member | None, device: str | None) -> str | None:
        """Start the run (or resume it) and wait for it to end; its final state, None when another process
        trains it now (it is counted when it is done there)."""
        started = time.monotonic()
        run_id = self._start_run(run, member, device)
        if run_id is None:
            return None
        with self._lock:
            self._current[number] = run_id
        if self._stop.is_set():
            self.runner.stop(run_id)
        state = self.runner.wait(run_id).state
        with self._lock:
            del self._current[number]
            self._durations.append(time.monotonic() - started)
        return state

    def _start_run(self, run: SweepRun, member: Member | None, device: str | None) -> str | None:
        """Resume the run's earlier attempt in its directory: from its checkpoint, or from its first step when
        it was killed or stopped before its first checkpoint (never left beside a new attempt as
        `interrupted`); else submit it anew (tagged with the sweep). None when another process trains it now."""
        if member is not None and member.state in RESUMABLE_STATES:
            try:
                return self.runner.resume(member.run_id, again=True)
            except RunBusyError:
                return None
            except (CheckpointError, OSError, ValueError):
                pass  # a damaged attempt is kept as it is, for its owner to look at; the run trains anew
        config = run.config if device is None else run.config.replace(device=device)
        return self.runner.submit(config, run.name, tags=(sweep_tag(self.sweep_id),))

    def stop(self) -> None:
        """Stop the sweep: no further run starts, the ones training stop within a micro-batch."""
        self._stop.set()
        with self._lock:
            current = list(self._current.values())
        for run_id in current:
            self.runner.stop(run_id)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the sweep ends (or the timeout passes); whether it has ended."""
        return self._ended.wait(timeout)

    def progress(self) -> SweepProgress:
        """Where the sweep stands now: runs done, failed, training, the time left."""
        with self._lock:
            current = [self.runner.snapshot(r) for r in self._current.values()]
            done = self._skipped + self._done_here
            started = self._done_here + self._failed + len(current)
            eta = _time_left(self._durations, current, self._todo - started, self._parallel)
            return SweepProgress(self.sweep_id, len(self.runs), self._skipped, done, self._failed,
                                 tuple(current), None if self._state != "running" else eta, self._state,
                                 self._message)


def _done(member: Member | None) -> bool:
    return member is not None and member.done


def _time_left(durations: list[float], current: list[RunSnapshot], waiting: int, parallel: int) -> float | None:
    """Seconds left: the runs training now by their own estimate, the runs not started at the median time
    of a run so far (or of the one training), spread over the lanes; None before anything is known."""
    known = [s.eta_s for s in current if s.eta_s is not None and s.state not in FINAL_STATES]
    if durations:
        per_run = statistics.median(durations)
    elif current and known:
        per_run = max(s.elapsed_s + (s.eta_s or 0.0) for s in current)
    else:
        return None if waiting > 0 or current else 0.0
    return max(known, default=0.0) + per_run * max(waiting, 0) / max(parallel, 1)

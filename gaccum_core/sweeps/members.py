"""Which runs on disk belong to a sweep: each run named sweep-<id>-c<cell>-r<repeat> whose config is the
one the spec gives that cell and repeat (wherever it ran: here, or from --print-commands on a cluster)."""

from __future__ import annotations

from dataclasses import dataclass

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.runs.store import RunStore
from gaccum_core.states import FINAL_STATES, RunState
from gaccum_core.sweeps.spec import SweepRun, parse_run_name, same_run

# Runs whose outcome is a result: a rerun would give the same (a diverged fp16 cell diverges again).
DONE_STATES = frozenset({RunState.FINISHED, RunState.DIVERGED})
RESUMABLE_STATES = frozenset({RunState.STOPPED, RunState.QUEUED, RunState.RUNNING})  # queued/running: a killed sweep
# Runs that ended without a result (failed, stopped): named in the summary; the sweep's next start trains them.
# An imported run is no sweep's member, even one exported from a sweep and imported again.
UNFINISHED_STATES = FINAL_STATES - DONE_STATES - {RunState.IMPORTED}


@dataclass(frozen=True)
class Member:
    """A run on disk for one of the sweep's runs: its id, and the state and message status.json gives."""

    run_id: str
    state: str
    message: str = ""

    @property
    def done(self) -> bool:
        """Whether its outcome counts (finished or diverged): a rerun of the sweep skips it."""
        return self.state in DONE_STATES


def _rank(member: Member) -> tuple[int, str]:
    """Done runs first, then those that can go on, then failed ones; the newest among equals."""
    order = 0 if member.done else 1 if member.state in RESUMABLE_STATES else 2
    return -order, member.run_id


def find_members(store: RunStore, sweep_id: str, runs: list[SweepRun]) -> dict[tuple[int, int], Member]:
    """For each (cell, repeat) with a run on disk, the best one: done, else resumable, else failed."""
    expected = {(r.cell, r.repeat): r.config for r in runs}
    found: dict[tuple[int, int], Member] = {}
    for run_id in store.list_runs():
        member = _member(store, run_id, sweep_id, expected)
        if member is None:
            continue
        key, candidate = member
        if key not in found or _rank(candidate) > _rank(found[key]):
            found[key] = candidate
    return found


def _member(store: RunStore, run_id: str, sweep_id: str,
            expected: dict[tuple[int, int], RunConfig]) -> tuple[tuple[int, int], Member] | None:
    """((cell, repeat), the run) when the run is one of the sweep's, else None (unreadable runs too)."""
    if sweep_id not in run_id:  # the run id carries the name's slug: most runs are passed over unread
        return None
    try:
        status = store.read_status(run_id)
        parsed = parse_run_name(status.get("name", "")) if isinstance(status, dict) else None
        if parsed is None or parsed[0] != sweep_id or (parsed[1], parsed[2]) not in expected:
            return None
        key = (parsed[1], parsed[2])
        if not same_run(store.read_config(run_id), expected[key]):
            return None
    except (OSError, ValueError, ConfigError):
        return None
    state, message = status.get("state", ""), status.get("message", "")
    if state == RunState.IMPORTED:
        return None
    return key, Member(run_id, state if state in FINAL_STATES or state in RESUMABLE_STATES else RunState.FAILED,
                       message if isinstance(message, str) else str(message))

"""The states a run can be in, named once for the runner, the run store, the catalog, the CLI and the pages.

queued -> running -> finished | stopped | failed | diverged. Two more are read off disk only:
interrupted (queued or running on disk, but no runner owns it: its server stopped) and damaged
(its files cannot be read). An imported run (another tool's TensorBoard event files, read in by
gaccum_core.tensorboard.importing) is imported from its first moment to its last: read-only, never started,
resumed or interrupted.
"""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    """A run's state; each value is what status.json and the pages show."""

    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    STOPPED = "stopped"
    FAILED = "failed"
    DIVERGED = "diverged"
    INTERRUPTED = "interrupted"
    DAMAGED = "damaged"
    IMPORTED = "imported"


# The states of a run that goes on no more: an imported run never went on here.
FINAL_STATES = frozenset({RunState.FINISHED, RunState.STOPPED, RunState.FAILED, RunState.DIVERGED,
                          RunState.IMPORTED})
# States whose message explains a failure the user must act on.
FAILURE_STATES = frozenset({RunState.FAILED, RunState.DIVERGED})

Outcome = tuple[RunState, str]  # how a run ended: its final state and the message the user sees


def state_line(state: str, message: str) -> str:
    """A run's end in one line: 'stopped by the user' (its message already names the state), else 'failed: why'."""
    if not message:
        return str(state)
    return message if message.split(":")[0].split()[0] == str(state) else f"{state}: {message}"

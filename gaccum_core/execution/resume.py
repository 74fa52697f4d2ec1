"""A run made ready to go on from its checkpoint: before the runner queues it again, and as its process starts.

Whether a page offers Resume at all (checkpoint.pt there, config.json read): resume_refusal. Before any worker or
rank starts, prepare_resume checks that checkpoint.pt loads, is whole, names a sharded run's own files and fits the
run's settings (longer ones where asked), then cuts the run's rows and events back to its step (cut_back). In the run's process,
resume_engine puts the checkpoint into the engine, each rank reading it itself and checking it again against its
own model. How a checkpoint is written, read and checked: gaccum_core.train.checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gaccum_core.config import RunConfig
from gaccum_core.words import first_line
from gaccum_core.runs.files import replace_atomically
from gaccum_core.runs.store import RunStore
from gaccum_core.tensorboard.importing import NOT_RESUMABLE
from gaccum_core.tensorboard.out import truncate_events
from gaccum_core.states import RunState
from gaccum_core.train.checkpoint import CheckpointError, CheckpointManager, file_sha256
from gaccum_core.train.distributed import Ranks, gather_objects, share_from_rank0
from gaccum_core.train.engine import Engine

# The states of a run that Resume can take on from its checkpoint (a finished one only when extended, from the CLI).
RESUMABLE = frozenset({RunState.STOPPED, RunState.INTERRUPTED, RunState.FAILED})


def checkpoints_in(run_dir: Path) -> CheckpointManager:
    """The checkpoints of the run in run_dir, each file replaced atomically as the run store writes its files."""
    return CheckpointManager(run_dir, replace_atomically)


def run_checkpoints(store: RunStore, run_id: str) -> CheckpointManager:
    """A run's checkpoints, in its directory."""
    return checkpoints_in(store.path(run_id))


def resume_refusal(store: RunStore, run_id: str) -> str | None:
    """Why a page offers no Resume for a stopped or failed run (it has no checkpoint.pt, or its config.json does
    not read), in a sentence; None when it offers it: what checkpoint.pt holds is checked when Resume is pressed
    (prepare_resume)."""
    if not store.checkpoint_path(run_id).exists():
        return (f"Run {run_id} cannot be resumed: it has no checkpoint.pt, as it ended before its first checkpoint "
                "was saved; start a new run with its settings instead.")
    try:
        store.read_config(run_id)
    except (OSError, ValueError) as exc:  # a ConfigError or a StoreError is a ValueError
        return f"Run {run_id} cannot be resumed: its config.json cannot be read ({first_line(exc)})."
    return None


def prepare_resume(store: RunStore, run_id: str, config: RunConfig, status: dict[str, Any], epochs: int | None,
                   max_steps: int | None, again: bool) -> tuple[RunConfig, int]:
    """The settings the run goes on with (a larger epochs or max_steps where given) and the step it resumes at,
    once its checkpoint is checked; its rows after that step are dropped. CheckpointError says why it cannot go on.
    again: a run with no checkpoint.pt yet (killed or stopped before its first) trains again from its first step."""
    if status.get("state") == RunState.IMPORTED:
        raise CheckpointError(f"run {run_id} {NOT_RESUMABLE}")
    longer = config.extended(epochs, max_steps)  # before anything is written: a shorter run is refused
    unsaved = again and not store.checkpoint_path(run_id).exists()
    step, last_eval_step = (0, -1) if unsaved else resumable_at(store, run_id, longer)
    if status.get("state") == RunState.FINISHED and longer == config:
        raise CheckpointError(f"run {run_id} finished all its steps: give a larger epochs or max_steps to extend it")
    if longer != config:
        store.change_config(run_id, longer, step)
    cut_back(store, run_id, step, last_eval_step)
    return longer, step


def cut_back(store: RunStore, run_id: str, step: int, last_eval_step: int) -> None:
    """The run's rows and TensorBoard events after its checkpoint dropped: it then reads as one run, each row once."""
    store.truncate_rows(run_id, step, last_eval_step)
    try:
        truncate_events(store.tensorboard_dir(run_id), step, last_eval_step)
    except Exception:  # noqa: BLE001 - a copy of the rows: the resumed run's event sink says why it cannot write
        pass


def resumable_at(store: RunStore, run_id: str, config: RunConfig) -> tuple[int, int]:
    """The step the run's checkpoint resumes at and the last step it had evaluated; CheckpointError naming what
    makes it impossible."""
    checkpoints = run_checkpoints(store, run_id)
    state = checkpoints.read()
    # Whole, and a sharded run's files those it wrote, before any rank starts (and loads them).
    checkpoints.check(state, config, store.model_shapes(run_id))
    counters = state["counters"]
    return counters["step"], counters.get("last_eval_step", counters["step"])


def resume_engine(store: RunStore | None, run_id: str, engine: Engine, ranks: Ranks) -> None:
    """A run with a checkpoint continues from it, its rows after it dropped. A data-parallel run's ranks all take
    rank 0's checkpoint (job_checkpoint; its ranks stop only at a step's end, so it holds no gradients in flight, and
    the ranks' weights and optimizer states are the same; each rank takes its own generators from its "rngs").
    store: on global rank 0 only."""
    if ranks.distributed:
        checkpoint = job_checkpoint(store, run_id, engine.config.nnodes > 1, mmap=engine.device.type != "cpu")
    else:
        checkpoint = run_checkpoints(store, run_id).load() if store is not None else None
    if checkpoint is None:
        return
    engine.resume_from(checkpoint)
    if store is not None:
        counters = engine.training.counters
        cut_back(store, run_id, counters.step, counters.last_eval_step)


def job_checkpoint(store: RunStore | None, run_id: str, across_machines: bool,
                   mmap: bool = False) -> dict[str, Any] | None:
    """Rank 0's checkpoint.pt on every rank of a job, each rank reading the file rank 0 names (mmap: mapping it,
    CheckpointManager.load): on one machine, and across machines where every rank finds the same file there (a
    shared runs directory: the same SHA-256). Only when some rank does not is the checkpoint sent from rank 0 through
    the process group (a checkpoint-sized broadcast, on NCCL through every GPU). store: on global rank 0 only; a
    collective."""
    path = store.checkpoint_path(run_id) if store is not None else None
    found = path is not None and path.exists()
    named = share_from_rank0((str(path), file_sha256(path) if across_machines else "") if found else None)
    if named is None:
        return None
    where, digest = Path(named[0]), named[1]
    if across_machines and not all(gather_objects(_holds(where, digest))):
        return share_from_rank0(run_checkpoints(store, run_id).load() if store is not None else None)
    return checkpoints_in(where.parent).load(mmap)


def _holds(path: Path, digest: str) -> bool:
    """Whether this machine has, at path, the file whose SHA-256 is digest."""
    try:
        return path.is_file() and file_sha256(path) == digest
    except OSError:
        return False

"""One run from start to final state, in this process: the body both executors share.

The thread executor calls execute() in a server thread; a worker process (gaccum_core.execution.worker) calls
it in a child, or on every rank of a torchrun job, where only global rank 0 writes the run directory.
Whatever raises, the caller gets a final state and a message; the run's memory is released, and a
failure to release it (a CUDA error surfaces at the next synchronisation) fails the run.
"""

from __future__ import annotations

import errno
import math
import os
import time
import traceback
from pathlib import Path
from typing import Callable

import torch

from gaccum_core import faults
from gaccum_core.config import RunConfig, applies
from gaccum_core.data.text import tokenise_corpus
from gaccum_core.data.tokenising import BuildProgress, TokenisingStopped
from gaccum_core.execution.resume import checkpoints_in, resume_engine
from gaccum_core.train.checkpoint import CheckpointManager
from gaccum_core.train.device import device_name
from gaccum_core.train.distributed import Ranks, share_from_rank0
from gaccum_core.train.engine import Engine
from gaccum_core.train.errors import CompileError, Diverged
from gaccum_core.train.step import StopCheck
from gaccum_core.train.memory import clear_cache, is_out_of_memory
from gaccum_core.runs.store import RunStore, now_iso
from gaccum_core.execution.supervisor import stopped_before_first_step
from gaccum_core.tensorboard.out import EventSink, final_figures
from gaccum_core.states import Outcome, RunState
from gaccum_core.train.metrics import FanOut, MetricSink, NullSink, RowKeeper, skipped_warning

PROGRESS_EVERY_S = 0.5  # how often tokenising progress is written as the run's message
STOPPED_TOKENISING = "stopped while tokenising its corpus, before its first step (nothing was cached)"


def failure_message(exc: BaseException, config: RunConfig) -> str:
    """A one-paragraph explanation of why a run failed, with advice where there is some."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if is_out_of_memory(exc):
        b, k = config.micro_batch_size, config.accum_steps
        advice = (f"lower the micro-batch size and raise accumulation steps to keep the effective batch "
                  f"of {config.effective_batch_size}, e.g. micro_batch_size={max(b // 2, 1)} with accum_steps={k * 2}")
        return f"out of memory at micro_batch_size={b}: {advice}. ({text[:200]})"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return text if "no space left on the device holding" in text else f"no space left on the device: {text}"
    if isinstance(exc, (ValueError, CompileError)):
        return text
    return f"{type(exc).__name__}: {text[:300]}"


def execute(store: RunStore | None, run_id: str, config: RunConfig, device: torch.device, should_stop: StopCheck,
            sink: MetricSink = NullSink(), on_start: Callable[[Engine], None] = lambda engine: None,
            ranks: Ranks = Ranks(), on_message: Callable[[str], None] = lambda text: None) -> Outcome:
    """Train one run and release its memory; its final state and message.

    store is the runs directory on global rank 0, which alone writes the run's files, and None on the
    other ranks of a data-parallel job, where an exception propagates (torchrun reports it and ends the job).
    A text corpus not yet in the token cache is tokenised first, its progress the run's message meanwhile
    (in status.json, and on_message for a run tracked in this process); should_stop stops that too."""
    writer, engine, kept = None, None, RowKeeper()  # kept: the step rows this process saw, for the warning
    events: EventSink | None = None  # the run's TensorBoard event files, beside its CSVs
    try:
        if store is not None:
            store.remove_temporaries(run_id)  # left by a kill or a full disk: this process alone writes the run
            store.update_status(run_id, state=RunState.RUNNING, started=now_iso(), device=device_name(device),
                                world_size=ranks.world_size, pid=os.getpid())
        _tokenise_first(store, run_id, config, should_stop, on_message)
        checkpoints = _checkpoints(store, run_id, ranks)
        engine = Engine(config, device, ranks, checkpoints, from_weights_file=not _resuming(store, run_id, ranks))
        if engine.sharded:
            engine.shared_checkpoints()  # a rank that cannot write its part of a checkpoint fails now, not at the first
        resume_engine(store, run_id, engine, ranks)
        from_step = engine.training.counters.step
        if store is not None:
            _begin_segment(store, run_id, engine)
            writer = store.writer(run_id)
            events = _event_sink(store, run_id, config, from_step, on_message)
        on_start(engine)
        state = engine.run(FanOut(*(s for s in (writer, events, sink) if s is not None), kept), should_stop,
                           _checkpoint_sink(checkpoints, store is not None, engine.sharded))
        model_state = engine.saved_state_dict()  # every rank of a sharded run gathers it to rank 0
        if store is not None:
            store.save_model(run_id, model_state)
            _end_segment(store, run_id, state, engine.training.counters.step)
            if events is not None and events.writing:
                events.finish(state, final_figures(store.metric_rows(run_id), store.eval_rows(run_id)))
        outcome = state, _message(state, from_step, engine.training.counters.step, kept)
    except Diverged as exc:  # every rank sees the same loss: all of them end here together
        outcome = RunState.DIVERGED, str(exc)
    except TokenisingStopped:
        outcome = RunState.STOPPED, STOPPED_TOKENISING
    except Exception as exc:  # every failure ends the run with a message, never a dead thread
        if store is None:
            raise
        outcome = RunState.FAILED, failure_message(exc, config)
        try:
            store.write_traceback(run_id, traceback.format_exc())
        except OSError:
            pass  # a full disk: the run still ends failed, its message says why
    finally:
        if writer is not None:
            writer.close()
        if events is not None:
            events.close()
        del engine
    if events is not None and events.problem:  # said as it happened, and in the final message
        outcome = outcome[0], "; ".join(m for m in (outcome[1], events.problem) if m)
    if store is None:
        clear_cache(device)  # an error here propagates: torchrun reports this rank's failure
        return outcome
    return release(store, run_id, device, *outcome)


def _tokenise_first(store: RunStore | None, run_id: str, config: RunConfig, should_stop: StopCheck,
                    on_message: Callable[[str], None]) -> None:
    """Build the run's token cache unless it is there (the ranks of a job wait for the one that builds it), saying
    'tokenising corpus.jsonl: 12 of 100 MB · 3.1 MB/s · ... · 28 s left' as the run's message at most every
    PROGRESS_EVERY_S, and the message it had again when done."""
    said_at = -math.inf

    def say(text: str) -> None:
        if store is not None:
            store.update_status(run_id, message=text)
        on_message(text)

    def progress(where: BuildProgress) -> None:
        nonlocal said_at
        if where.waiting or time.monotonic() - said_at >= PROGRESS_EVERY_S:
            said_at = time.monotonic()
            say(where.words())

    before = store.read_status(run_id).get("message", "") if store is not None else ""
    try:
        tokenise_corpus(config, progress, should_stop)
    finally:
        if said_at > -math.inf:
            say(before)


def _event_sink(store: RunStore, run_id: str, config: RunConfig, from_step: int,
                on_message: Callable[[str], None]) -> EventSink | None:
    """The run's TensorBoard event files in its tb/ (None with tensorboard off), from the step it starts after; a
    failure to write them is the run's message from then on (and the end's)."""
    if config.tensorboard == "off":
        return None

    def say(text: str) -> None:
        store.update_status(run_id, message=text)
        on_message(text)

    name = store.read_status(run_id).get("name", "")
    return EventSink(store.tensorboard_dir(run_id), config, run_id, name, from_step, say)


def _checkpoints(store: RunStore | None, run_id: str, ranks: Ranks) -> CheckpointManager | None:
    """The run's checkpoints in rank 0's run directory, on every rank (a sharded run's ranks each write their part
    of them there)."""
    path = str(store.path(run_id).resolve()) if store is not None else None
    shared = share_from_rank0(path) if ranks.distributed else path
    return None if shared is None else checkpoints_in(Path(shared))


def _resuming(store: RunStore | None, run_id: str, ranks: Ranks) -> bool:
    """Whether the run goes on from its checkpoint (rank 0's, shared with every rank): its weights come from there,
    never from its weights file again (which may have changed or gone since it started)."""
    found = store is not None and store.checkpoint_path(run_id).exists()
    return share_from_rank0(found) if ranks.distributed else found


def _checkpoint_sink(checkpoints: CheckpointManager | None, writes: bool,
                     sharded: bool) -> Callable[[dict], None] | None:
    """Where checkpoints go: rank 0 (writes) saves checkpoint.pt; the other ranks of a sharded run take part (each
    writes its shards inside Engine.checkpoint) and keep nothing else; the other ranks of a DDP run take none."""
    if writes and checkpoints is not None:
        return checkpoints.save
    return (lambda state: None) if sharded else None


def _message(state: RunState, from_step: int, step: int, kept: RowKeeper) -> str:
    """A run's final message: how it stopped (before its first step, or later), else the skipped-steps warning."""
    if state != RunState.STOPPED:
        return skipped_warning(kept.steps)
    return "stopped by the user" if step > from_step else stopped_before_first_step(from_step)


def _begin_segment(store: RunStore, run_id: str, engine: Engine) -> None:
    """A new segment in status.json, from the step the run starts at (after its checkpoint's, when resumed)."""
    status = store.read_status(run_id)
    segments = [*status.get("segments", []), {"started": now_iso(), "from_step": engine.training.counters.step}]
    # Where the initial weights came from (an hf: model's file, your weights_file with its sha256, or the seed): said
    # once, at the start; a resumed run's come from its checkpoint, and this stays.
    origin = {} if "weights" in status else {"weights": getattr(engine.model, "origin", "initialised with the run's seed")}
    # seq-mean-token-sum-norm's C as the run uses it (loss_agg_norm 0: the longest completion, computed at its start)
    norm = {"loss_agg_norm": engine.norm_c} if applies(engine.config, "loss_agg_norm") else {}
    store.update_status(run_id, total_steps=engine.total_steps, segments=segments, **origin, **norm)


def _end_segment(store: RunStore, run_id: str, state: RunState, step: int) -> None:
    segments = list(store.read_status(run_id).get("segments", [{}]))
    segments[-1] = {**segments[-1], "ended": now_iso(), "to_step": step, "state": str(state)}
    store.update_status(run_id, segments=segments)


def release(store: RunStore, run_id: str, device: torch.device, state: RunState, message: str) -> Outcome:
    """Free the run's memory; a failure to do so fails the run, whose last steps are then suspect."""
    try:
        if faults.ARMED:
            faults.check_cleanup()
        clear_cache(device)
    except Exception as exc:
        # A device error surfaces at the next synchronisation, which may be this one.
        store.write_traceback(run_id, traceback.format_exc())
        before = f"it had {state}" + (f" ({message})" if message else "")
        return RunState.FAILED, (f"releasing {device_name(device)}'s memory after the run failed: "
                                 f"{type(exc).__name__}: {str(exc)[:300]}; {before}. Device errors surface late, "
                                 "so its last steps may be wrong: restart the server if the next run fails too")
    return state, message

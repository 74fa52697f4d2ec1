"""A candidate's measured burst: the engine itself runs a few optimizer steps of (b, k = E / b) with
the candidate's options, and reports its training memory and speed.

Training memory, counted the same way on every device: weights (parameters and buffers) + gradients
+ optimizer state + the peak of bytes autograd holds for backward over a whole window. On CUDA the
allocator's peak (max_memory_allocated) and reserved memory are measured too, and the peak decides;
on the CPU, whose resident memory is mostly the interpreter and libraries, the counted figure does.
"""

from __future__ import annotations

import statistics

import torch

from gaccum_core.config import ConfigError, RunConfig, first_line
from gaccum_core.train.memory import MB, SavedBytesPeak, clear_cache, is_out_of_memory, training_memory
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper
from gaccum_core.plan.search import FAILED, FITS, OUT_OF_MEMORY, OVER_BUDGET, Candidate, Options

WARMUP_STEPS = 1  # compilation, allocator growth, optimizer state creation: excluded from every figure
TIMED_STEPS = 2


def burst_config(base: RunConfig, options: Options, micro_batch_size: int, effective_batch: int) -> RunConfig:
    """The config a candidate runs: the base run's model, data and optimizer, one process, no checkpoints
    (the burst's steps and its lack of evaluation are told to Engine.run)."""
    return base.replace(micro_batch_size=micro_batch_size, accum_steps=effective_batch // micro_batch_size,
                        amp=options.amp, clear_cache=options.clear_cache, compile=options.compile,
                        checkpoint_every=0, nproc=1, nnodes=1, sync_every_micro_batch=False)


def _train(engine: Engine, rows: RowKeeper, steps: int) -> None:
    """Run `steps` more optimizer steps, evaluating nothing."""
    engine.run(rows, steps=steps, evaluate=False)


def _memory_window(engine: Engine, rows: RowKeeper) -> dict[str, float | None]:
    """One optimizer step under the saved-bytes meter and, on CUDA, a fresh allocator peak."""
    device = engine.device
    meter = SavedBytesPeak(engine.opt.params)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    with meter.measure():
        _train(engine, rows, 1)
    figures: dict[str, float | None] = {**training_memory(engine, meter.peak), "cuda_peak_mb": None,
                                        "cuda_reserved_mb": None}
    if device.type == "cuda":
        figures["cuda_peak_mb"] = torch.cuda.max_memory_allocated(device) / MB
        figures["cuda_reserved_mb"] = torch.cuda.memory_reserved(device) / MB
    return figures


def measure(base: RunConfig, options: Options, micro_batch_size: int, effective_batch: int, budget_mb: float,
            timed_steps: int = TIMED_STEPS) -> Candidate:
    """Run the candidate's burst; out of memory, over budget and errors are results, never raised."""
    config = burst_config(base, options, micro_batch_size, effective_batch)
    k = config.accum_steps
    engine = None
    try:
        engine = Engine(config)
        rows = RowKeeper()
        _train(engine, rows, WARMUP_STEPS)
        memory = _memory_window(engine, rows)
        peak = memory["cuda_peak_mb"] if memory["cuda_peak_mb"] is not None else memory["counted_mb"]
        if peak > budget_mb:
            return Candidate(options, micro_batch_size, k, OVER_BUDGET, peak, detail=memory)
        before = len(rows.steps)
        _train(engine, rows, timed_steps)
        timed = rows.steps[before:]
        step_time = statistics.median(r["step_time_s"] for r in timed)
        speed = statistics.median(r["samples"] / r["step_time_s"] for r in timed)
        if config.is_text:  # sequences differ in length: tokens/s is the language run's throughput
            memory["tokens_per_s"] = statistics.median(r["tokens"] / r["step_time_s"] for r in timed)
        return Candidate(options, micro_batch_size, k, FITS, peak, speed, step_time, memory)
    except Exception as exc:  # noqa: BLE001 - every failure of a candidate is a row of the plan
        return _failure(options, micro_batch_size, k, exc)
    finally:
        device = engine.device if engine is not None else None
        del engine  # before clearing: the candidate's tensors must go before the next one allocates
        if device is not None:
            clear_cache(device)


def _failure(options: Options, micro_batch_size: int, k: int, exc: BaseException) -> Candidate:
    if is_out_of_memory(exc) or (exc.__cause__ is not None and is_out_of_memory(exc.__cause__)):
        return Candidate(options, micro_batch_size, k, OUT_OF_MEMORY, detail={"message": first_line(exc, 300)})
    # A BatchNorm model cannot train on micro-batches of one sample: a larger b may work.
    larger = isinstance(exc, ConfigError) and exc.field == "micro_batch_size"
    return Candidate(options, micro_batch_size, k, FAILED,
                     detail={"message": first_line(exc, 300), "larger_may_work": larger})

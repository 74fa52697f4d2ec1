"""A candidate measured on the engine itself, with the candidate's options: its training memory over
one optimizer step (measure), and its speed over full windows of (b, k = E / b) until known, several
candidates timed in turns (time_speeds).

Training memory, counted the same way on every device: weights (parameters and buffers) + gradients
+ optimizer state + the peak of bytes autograd holds for backward over a window. On CUDA the
allocator's peak (max_memory_allocated) and reserved memory are measured too, and the peak decides;
on the CPU, whose resident memory is mostly the interpreter and libraries, the counted figure does.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.words import first_line
from gaccum_core.train.memory import MB, SavedBytesPeak, clear_cache, is_out_of_memory, training_memory
from gaccum_core.train.device import resolve_device
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper
from gaccum_core.plan.search import FAILED, FITS, OUT_OF_MEMORY, OVER_BUDGET, Candidate, Options
from gaccum_core.plan.speed import Speed, Step, Timing, time_in_turns, turn_speeds

WARMUP_STEPS = 1  # compilation, allocator growth, optimizer state creation: excluded from every figure
# A memory window of 2 micro-batches has the allocator peak of any k >= 2: the second micro-batch's
# activations sit on the gradients the first left, as every later one's do (one graph is alive at a
# time). The counted figure (the CPU) holds one micro-batch's saved bytes whatever k: 1 micro-batch, and
# no warm-up (the optimizer state it counts exists after the window's step). Text is measured over its
# whole window: its micro-batches differ in length.
ALLOCATOR_WINDOW, COUNTED_WINDOW = 2, 1
SIDE_BY_SIDE = 8  # engines timed in turns on the CPU, each holding its weights and optimizer state
OnStep = Callable[[int, Candidate, bool], None]  # (index, the candidate with its speed so far, finished)


def free_cores() -> float | None:
    """The cores the last minute's load average leaves free (os.cpu_count() less the load); None where there is
    no load average."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    return (os.cpu_count() or 1) - load


@contextmanager
def threads_for_the_cpu(device: torch.device) -> Iterator[int]:
    """On the CPU, torch's intra-op threads cut to the cores the load leaves free (at least one) while the
    block runs, restored after; yields the count. A team of threads on cores others are using waits at
    every op for the one descheduled: measured on a 2-core box at load 15, a gpt step took 8 s on 2 threads
    and 0.35 s on 1, and the same plan took 17 s or 82 s by chance at load 3.5. Decided once, before the
    plan's own threads add to the load."""
    threads = torch.get_num_threads()
    free = free_cores() if device.type == "cpu" else None
    wanted = threads if free is None else max(1, min(threads, round(free)))
    torch.set_num_threads(wanted)
    try:
        yield wanted
    finally:
        torch.set_num_threads(threads)


def burst_config(base: RunConfig, options: Options, micro_batch_size: int, effective_batch: int) -> RunConfig:
    """The config a candidate runs: the base run's model, data and optimizer, one unsharded process, no
    checkpoints (the burst's steps and its lack of evaluation are told to Engine.run)."""
    return base.replace(micro_batch_size=micro_batch_size, accum_steps=effective_batch // micro_batch_size,
                        amp=options.amp, clear_cache=options.clear_cache, compile=options.compile,
                        activation_checkpointing=options.activation_checkpointing,
                        checkpoint_every=0, nproc=1, nnodes=1, sync_every_micro_batch=False, sharding="ddp")


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
    # The engine counts the first micro-batch of each size itself, and its hooks are the innermost then.
    saved = max(meter.peak, engine.activations.peak)
    figures: dict[str, float | None] = {**training_memory(engine, saved), "cuda_peak_mb": None,
                                        "cuda_reserved_mb": None}
    if device.type == "cuda":
        figures["cuda_peak_mb"] = torch.cuda.max_memory_allocated(device) / MB
        figures["cuda_reserved_mb"] = torch.cuda.memory_reserved(device) / MB
    return figures


def measure(base: RunConfig, options: Options, micro_batch_size: int, effective_batch: int,
            budget_mb: float) -> Candidate:
    """The candidate's training memory over one window, after a warm-up step; out of memory, over budget
    and errors are results, never raised. Not timed: time_speed does that for the sizes that matter."""
    config = burst_config(base, options, micro_batch_size, effective_batch)
    k = config.accum_steps
    try:
        memory = _memory(_memory_config(config))
        peak = memory["cuda_peak_mb"] if memory["cuda_peak_mb"] is not None else memory["counted_mb"]
        return Candidate(options, micro_batch_size, k, FITS if peak <= budget_mb else OVER_BUDGET, peak, detail=memory)
    except Exception as exc:  # noqa: BLE001 - every failure of a candidate is a row of the plan
        return _failure(options, micro_batch_size, k, exc)
    finally:  # the engine is gone with _memory's frame: free it before the next candidate allocates
        clear_cache(resolve_device(base.device))


def time_speeds(base: RunConfig, candidates: Sequence[Candidate], effective_batch: int, timing: Timing = Timing(),
                on_step: OnStep | None = None) -> list[Candidate]:
    """The candidates with their speeds: full windows of (b, k) after a warm-up step each, timed until
    `timing` says each speed is known; on_step(index, candidate so far, finished) after every step. On the
    CPU up to SIDE_BY_SIDE engines are timed in turns; on CUDA one after another (each needs the
    device's memory to itself). An error while timing is that candidate's result."""
    device = resolve_device(base.device)
    size = 1 if device.type == "cuda" else SIDE_BY_SIDE
    timed: list[Candidate] = []
    for start in range(0, len(candidates), size):
        report = None if on_step is None else (lambda i, c, end, start=start: on_step(start + i, c, end))
        timed += _time_group(base, candidates[start:start + size], effective_batch, timing, report, start // size)
        clear_cache(device)  # the group's engines went with _time_group's frame
    return timed


def _time_group(base: RunConfig, candidates: Sequence[Candidate], effective_batch: int, timing: Timing,
                on_step: OnStep | None, group: int) -> list[Candidate]:
    """Build and warm up an engine per candidate, then time them in turns (group: their number among the
    plan's groups, kept on each candidate so that the ranking pairs their steps)."""
    configs = [burst_config(base, c.options, c.micro_batch_size, effective_batch) for c in candidates]
    engines: list[Engine | None] = []
    kept = [RowKeeper() for _ in candidates]
    failures: dict[int, BaseException] = {}
    for i, config in enumerate(configs):
        engine = None
        try:
            engine = Engine(config)
            _train(engine, kept[i], WARMUP_STEPS)
        except Exception as exc:  # noqa: BLE001 - every failure of a candidate is a row of the plan
            failures[i], engine = exc, None
        engines.append(engine)

    def stepper(i: int) -> Step:
        def step() -> Mapping[str, Any] | None:
            if engines[i] is None:
                return None
            try:
                _train(engines[i], kept[i], 1)
                return kept[i].steps[-1]
            except Exception as exc:  # noqa: BLE001 - as above
                failures[i], engines[i] = exc, None
                return None
        return step

    report = None if on_step is None else (lambda i, speed, end: on_step(
        i, _with_speed(candidates[i], speed, kept[i].steps[WARMUP_STEPS:], configs[i], group), end))
    results = time_in_turns([stepper(i) for i in range(len(candidates))], timing, report)
    return [_failed(c, failures[i]) if i in failures else _with_speed(c, speed, rows, configs[i], group)
            for i, (c, (speed, rows)) in enumerate(zip(candidates, results))]


def _with_speed(candidate: Candidate, speed: Speed, rows: Sequence[Mapping[str, Any]], config: RunConfig,
                group: int) -> Candidate:
    """The candidate with the speed of its timed rows, and each row's, timed in turns with the group's."""
    detail = dict(candidate.detail)
    if config.is_text:  # sequences differ in length: tokens/s is the language run's throughput
        detail["tokens_per_s"] = statistics.fmean(r["tokens"] / r["step_time_s"] for r in rows)
    return dataclasses.replace(candidate, samples_per_s=speed.value, samples_per_s_error=speed.error,
                               timed_steps=speed.steps, detail=detail,
                               step_time_s=statistics.median(r["step_time_s"] for r in rows),
                               turn_speeds=turn_speeds(rows), timed_with=group)


def _failed(candidate: Candidate, exc: BaseException) -> Candidate:
    """A measured candidate whose timing failed: the failure's status and message, its memory kept."""
    failed = _failure(candidate.options, candidate.micro_batch_size, candidate.accum_steps, exc)
    return dataclasses.replace(failed, peak_mb=candidate.peak_mb, detail={**candidate.detail, **failed.detail})


def _memory_config(config: RunConfig) -> RunConfig:
    """The burst's config with the shortest window that has the same memory figures (see ALLOCATOR_WINDOW)."""
    if config.is_text:
        return config
    counted = resolve_device(config.device).type != "cuda" and config.compile == "off"
    return config.replace(accum_steps=min(config.accum_steps, COUNTED_WINDOW if counted else ALLOCATOR_WINDOW))


def _memory(config: RunConfig) -> dict[str, float | None]:
    """A fresh engine's memory figures over one window, after WARMUP_STEPS where the allocator's figures
    or compilation need one."""
    engine = Engine(config)
    rows = RowKeeper()
    if engine.device.type == "cuda" or config.compile != "off":
        _train(engine, rows, WARMUP_STEPS)
    return _memory_window(engine, rows)


def _failure(options: Options, micro_batch_size: int, k: int, exc: BaseException) -> Candidate:
    if is_out_of_memory(exc) or (exc.__cause__ is not None and is_out_of_memory(exc.__cause__)):
        return Candidate(options, micro_batch_size, k, OUT_OF_MEMORY, detail={"message": first_line(exc, 300)})
    # A BatchNorm model cannot train on micro-batches of one sample: a larger b may work.
    larger = isinstance(exc, ConfigError) and exc.field == "micro_batch_size"
    return Candidate(options, micro_batch_size, k, FAILED,
                     detail={"message": first_line(exc, 300), "larger_may_work": larger})

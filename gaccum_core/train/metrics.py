"""Metric rows, the sink protocol that receives them, and the small math the UI and CLI share."""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol, Sequence

if TYPE_CHECKING:
    import pandas as pd

STEP_COLUMNS = (
    "step", "epoch", "micro_batches", "samples", "samples_seen", "loss", "lr", "grad_norm",
    "scale", "skipped", "skipped_total", "mem_allocated_mb", "mem_reserved_mb", "mem_peak_mb",
    "activation_mb", "cache_clear_s", "step_time_s", "samples_per_s", "wall_time_s",
    "world_size", "allreduce_calls", "allreduce_bytes", "tokens", "tokens_seen", "tokens_per_s",
    "weights_mb", "gradients_mb", "optimizer_mb", "train_mem_mb",
    "reduce_scatter_calls", "reduce_scatter_bytes", "all_gather_calls", "all_gather_bytes", "grad_kept_mb",
)
# FSDP's collectives per optimizer step (0 without sharding), and the gradient memory a rank holds between
# micro-batches: the whole .grad without sharding, 1/N of it with fsdp_sync every, all of it (fp32) with last.
COLLECTIVE_COLUMNS = ("allreduce_calls", "allreduce_bytes", "reduce_scatter_calls", "reduce_scatter_bytes",
                      "all_gather_calls", "all_gather_bytes")
# The training memory the planner counts (train.memory.TrainingMemory): weights + gradients + optimizer
# state + activation_mb = train_mem_mb, the same figure on every device.
TRAINING_MEMORY_COLUMNS = ("weights_mb", "gradients_mb", "optimizer_mb", "train_mem_mb")
# eval_samples: the test images or sequences an evaluation read (RunConfig.eval_batches caps them); eval_tokens:
# a language run's target tokens among them, what its test_loss is the mean over.
EVAL_COLUMNS = ("epoch", "step", "test_loss", "test_accuracy", "wall_time_s", "perplexity", "eval_samples",
                "eval_tokens")
# Columns added after runs were first written, with the value every row of an older run had.
ADDED_COLUMNS = {"world_size": 1, "allreduce_calls": 0, "allreduce_bytes": 0,
                 "tokens": math.nan, "tokens_seen": math.nan, "tokens_per_s": math.nan,
                 **{column: math.nan for column in TRAINING_MEMORY_COLUMNS},
                 **{column: 0 for column in COLLECTIVE_COLUMNS[2:]}, "grad_kept_mb": math.nan}
ADDED_EVAL_COLUMNS = {"perplexity": math.nan, "eval_samples": math.nan, "eval_tokens": math.nan}
# Columns holding counts; every other metric is a float. An empty cell is None.
COUNT_COLUMNS = frozenset({"step", "epoch", "micro_batches", "samples", "samples_seen", "skipped", "skipped_total",
                           "world_size", "tokens", "tokens_seen", *COLLECTIVE_COLUMNS, "eval_samples", "eval_tokens"})

Row = dict[str, Any]


class MetricSink(Protocol):
    """Receives one row per optimizer step and one per evaluation, in order."""

    def log_step(self, row: Row) -> None:
        """Take one optimizer step's metrics (keys: STEP_COLUMNS)."""

    def log_eval(self, row: Row) -> None:
        """Take one evaluation's metrics (keys: EVAL_COLUMNS)."""


class NullSink:
    """A sink that keeps nothing (oracle tests, benchmarks of the loop alone)."""

    def log_step(self, row: Row) -> None:
        """Drop the row."""

    def log_eval(self, row: Row) -> None:
        """Drop the row."""


class RowKeeper:
    """A sink that keeps every row in memory, each a read-only copy: readers share the rows (copying
    every row on every poll would cost a live page O(steps) per second). With a lock, rows are
    appended under it, for readers in other threads that take the same lock."""

    def __init__(self, lock: AbstractContextManager | None = None) -> None:
        self.steps: list[Mapping[str, Any]] = []
        self.evals: list[Mapping[str, Any]] = []
        self._lock = lock if lock is not None else nullcontext()

    def log_step(self, row: Row) -> None:
        """Keep the step row."""
        with self._lock:
            self.steps.append(MappingProxyType(dict(row)))

    def log_eval(self, row: Row) -> None:
        """Keep the eval row."""
        with self._lock:
            self.evals.append(MappingProxyType(dict(row)))


class FanOut:
    """Passes every row to several sinks."""

    def __init__(self, *sinks: MetricSink) -> None:
        self.sinks = sinks

    def log_step(self, row: Row) -> None:
        """Give the row to every sink."""
        for sink in self.sinks:
            sink.log_step(row)

    def log_eval(self, row: Row) -> None:
        """Give the row to every sink."""
        for sink in self.sinks:
            sink.log_eval(row)


def parse_row(columns: Sequence[str], values: Sequence[str]) -> Row:
    """A CSV line read back as the row that was written: ints, floats, None for an empty cell."""
    def typed(name: str, text: str) -> int | float | None:
        if text == "":
            return None
        return int(text) if name in COUNT_COLUMNS else float(text)
    return {name: typed(name, text) for name, text in zip(columns, values)}


def eta_seconds(rows: Sequence[Mapping[str, Any]], total_steps: int) -> float | None:
    """Seconds left at the run's average pace: the last row's wall_time_s over its step; None before the first
    step. wall_time_s counts the training time of every segment (the checkpoint carries it across a resume),
    as the step counts every segment's steps."""
    last = rows[-1] if rows else {}
    step, wall_time = last.get("step"), last.get("wall_time_s")
    if not step or wall_time is None or not wall_time > 0:
        return None
    return max(total_steps - step, 0) * wall_time / step


def time_left_words(seconds: float | None) -> str:
    """'1 min 05 s left' or '42 s left'; an empty string before there is an estimate."""
    if seconds is None:
        return ""
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes} min {secs:02d} s left" if minutes else f"{secs} s left"


def skipped_warning(rows: Sequence[Row], most: float = 0.5) -> str:
    """A warning when more than `most` of the steps were skipped by the GradScaler, else ''."""
    if not rows:
        return ""
    # A resumed run's rows start mid-run: count its steps by number, not by the rows this segment saw.
    skipped, steps = int(rows[-1]["skipped_total"]), int(rows[-1].get("step") or len(rows))
    if skipped <= most * steps:
        return ""
    scale = rows[-1]["scale"]
    at_scale = f" (last loss scale {scale:g})" if scale else ""
    return (f"{skipped} of {steps} optimizer steps were skipped: the GradScaler found inf/NaN gradients"
            f"{at_scale}, so the weights barely moved. Lower the initial loss scale, or train in bf16 or fp32")


def last_epoch_loss(metrics: pd.DataFrame) -> float:
    """The training loss over the run's last epoch, each step weighted by its samples: the last step alone
    is an epoch's partial window (29 digits at E=64), whose loss swings with the seed."""
    if metrics.empty or "loss" not in metrics:
        return math.nan
    rows = metrics[metrics["loss"].notna()]  # an imported run's step may hold another figure alone (its lr)
    if rows.empty:
        return math.nan
    epochs = rows["epoch"] if "epoch" in rows else None
    last = rows[epochs == epochs.iloc[-1]] if epochs is not None and epochs.notna().iloc[-1] else rows.tail(1)
    if "samples" not in last or last["samples"].isna().any():  # imported: steps of unknown size weigh alike
        return float(last["loss"].mean())
    return float((last["loss"] * last["samples"]).sum() / last["samples"].sum())


def smooth_ema(values: Iterable[float], weight: float) -> list[float]:
    """Debiased exponential moving average, as TensorBoard smooths scalars (weight in [0, 1))."""
    out, last, debias = [], 0.0, 1.0
    for value in values:
        if not math.isfinite(value):
            out.append(value)
            continue
        last = last * weight + (1 - weight) * value
        debias *= weight
        out.append(last / (1 - debias))
    return out

"""Does accumulation equal the big batch? Both compared on the user's own model, data and precision.

compare_gradients takes one window's gradient both ways from the same weights; train_side_by_side
trains two copies of the model for a few steps. When the big-batch reference does not fit in
memory, both raise ReferenceTooLarge, which says how large a reference does fit.
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch import nn

from gaccum_core.train.accumulation import plan_epoch, planned_steps
from gaccum_core.train.checks import check_micro_batch
from gaccum_core.config import RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.train.device import resolve_device
from gaccum_core.train.loss import summed_cross_entropy
from gaccum_core.train.memory import clear_cache, is_out_of_memory
from gaccum_core.models.build import build_seeded_model
from gaccum_core.train.activation import checkpoint_blocks
from gaccum_core.train.precision import Precision, true_fp32
from gaccum_core.train.step import Optimization, accumulate, accumulate_step
from gaccum_core.train.weighting import Weighting, aggregation_constant, sample_order, window_weighting
from gaccum_core.lab.verdict import MODULE_COLUMNS, TOLERANCES, find_reasons, module_table, verdict_text

if TYPE_CHECKING:  # pandas is imported on use: the command line loads this module in every process
    import pandas as pd

COLUMNS = ["name", "shape", "numel", "max_abs_diff", "rel_l2", "cosine"]
# Told (done, total) as the work goes: samples through forward and backward, or optimizer steps.
Progress = Callable[[int, int], None]
SIDE_BY_SIDE_COLUMNS = ["step", "loss_big", "loss_accum", "weight_distance"]


@dataclass(frozen=True)
class GradientReport:
    """Per-parameter and per-module differences between the big-batch and the accumulated gradient,
    a verdict, and the short names of the causes found when they differ."""

    table: pd.DataFrame  # one row per parameter tensor, columns COLUMNS
    verdict: str
    equal: bool
    modules: pd.DataFrame = field(default_factory=lambda: _frame([], MODULE_COLUMNS))
    reasons: tuple[str, ...] = ()  # e.g. ("BatchNorm", "dropout"); empty when equal


class ReferenceTooLarge(RuntimeError):
    """One batch of b·k samples, the reference for accumulation, does not fit in memory."""

    def __init__(self, effective_batch: int, largest_fitting: int, micro_batch_size: int | None = None) -> None:
        self.effective_batch, self.largest_fitting = effective_batch, largest_fitting
        self.micro_batch_size = micro_batch_size
        if largest_fitting:
            setting = f" (accum_steps={largest_fitting // micro_batch_size})" if micro_batch_size else ""
            advice = f"the largest that fits is {largest_fitting}{setting}: compare at that size"
        else:
            advice = "not even one micro-batch fits: lower micro_batch_size"
        super().__init__(f"the big-batch reference of {effective_batch} samples does not fit in memory; {advice}")

    def __reduce__(self) -> tuple:
        """Pickled as its parts (it crosses from a worker process to the page)."""
        return type(self), (self.effective_batch, self.largest_fitting, self.micro_batch_size)


def _frame(rows: list, columns: list[str]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(rows, columns=columns)


def compare_gradients(config: RunConfig, progress: Progress | None = None) -> GradientReport:
    """The gradient of the first b·k samples as one batch and accumulated over k micro-batches of b;
    progress is told the samples passed of the 2·b·k (ConfigError when b·k exceeds the training set).
    fp32 on CUDA is IEEE fp32 throughout, TF32 off (true_fp32), as the run computes it."""
    with true_fp32(resolve_device(config.device)):
        return _unless_out_of_memory(config, lambda: _compare(config, progress or _quiet))


def train_side_by_side(config: RunConfig, steps: int, progress: Progress | None = None) -> pd.DataFrame:
    """Train a big-batch copy and an accumulating copy for `steps` optimizer steps, one row per step;
    progress is told the steps done of `steps`."""
    if steps < 1:
        raise ValueError(f"steps={steps!r} is not allowed: an integer ≥ 1")
    with true_fp32(resolve_device(config.device)):  # IEEE fp32 on CUDA, as compare_gradients
        return _unless_out_of_memory(config, lambda: _side_by_side(config, steps, progress or _quiet))


def _quiet(done: int, total: int) -> None:
    """No one to tell."""


def largest_fitting_effective_batch(config: RunConfig) -> int:
    """The largest b·k' (k' = k, k/2, k/4, …, 1) whose one-batch forward+backward fits; 0 if none does."""
    bench = _Bench(config)
    samples = bench.samples(0, 0, config.effective_batch_size)
    x, y = samples.x, samples.y
    k = config.accum_steps
    # Whole micro-batches only, so the answer is a b·k' the user can set.
    for accum_steps in sorted({k >> i for i in range(k.bit_length())}, reverse=True):
        size = min(config.micro_batch_size * accum_steps, len(x))
        if _fits(bench, x[:size], y[:size]):
            return size
    return 0


def _unless_out_of_memory(config: RunConfig, run: Callable[[], Any]) -> Any:
    """run(), turning out-of-memory into ReferenceTooLarge with the largest size that fits."""
    try:
        return run()
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
    # Outside the except block: the traceback, and the tensors its frames hold, are released.
    clear_cache(resolve_device(config.device))
    raise ReferenceTooLarge(config.effective_batch_size, largest_fitting_effective_batch(config),
                            config.micro_batch_size)


class _Bench:
    """The run's device, training data, precision and model (seeded exactly as the engine seeds it)."""

    def __init__(self, config: RunConfig) -> None:
        self.config, self.device = config, resolve_device(config.device)
        data = load_data(config)
        self.train = data.train
        check_micro_batch(config, len(self.train), whole_window=True)  # else fewer samples than b·k compared
        self.norm_c = aggregation_constant(config, self.train)  # the engine's C
        self.precision = Precision(config.amp, self.device, config.init_scale, config.growth_interval)
        # Eager even when config.compile is on (the question is arithmetic), in train mode as training runs it.
        self.model = build_seeded_model(config, data.input_shape, data.num_classes).to(self.device).train()
        checkpoint_blocks(self.model, config)  # as a run checkpoints them (the same gradients, less memory)

    def samples(self, epoch: int, start: int, stop: int) -> Samples:
        """Samples [start, stop) of the epoch's order, the engine's (pg's keeps groups together): their indices,
        and (x, y) on the device."""
        indices = sample_order(self.config, self.train, epoch)[start:stop]
        x, y = self.train.batch(indices)
        return Samples(indices, x.to(self.device), y.to(self.device))

    def weighted(self, samples: Samples, micro_batch_size: int) -> tuple[list, Weighting]:
        """The window in micro-batches of micro_batch_size, numbered, and their weighting by the engine's rule
        (window_weighting: divisors, or a records task's per-token weights); the big batch (one micro-batch) is the
        window's mean, aggregated by the run's loss_agg."""
        config, size = self.config, len(samples.indices)
        if micro_batch_size >= size:
            config = config.replace(reduction="sum" if config.reduction == "sum" else "mean")
        window = plan_epoch(size, micro_batch_size, -(-size // micro_batch_size))[0]
        micro = zip(samples.indices.split(micro_batch_size), samples.x.split(micro_batch_size),
                    samples.y.split(micro_batch_size))
        return list(enumerate(micro)), window_weighting(config, self.train, window, samples.indices, 1, self.norm_c)

    def loss(self, model: nn.Module, weighting: Weighting, precision: Precision, numbered: tuple) -> torch.Tensor:
        """One numbered micro-batch's loss as the engine takes it (weighted, or summed for its divisor)."""
        i, (indices, x, y) = numbered
        return weighting.loss(i, model, precision, x, y, self.train, indices)


@dataclass(frozen=True)
class Samples:
    """A window's samples: their indices in the training set and their batch (x, y) on the device."""

    indices: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor


def _fits(bench: _Bench, x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether one forward+backward of this batch fits in memory; frees what it took either way."""
    try:
        summed_cross_entropy(bench.model, bench.precision, x, y).backward()
        fitted = True
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        fitted = False
    bench.model.zero_grad(set_to_none=True)
    clear_cache(bench.device)
    return fitted


def _window_gradients(bench: _Bench, samples: Samples, micro_batch_size: int, scale: float,
                      passed: Callable[[int], None]) -> list[torch.Tensor]:
    """Unscaled gradients of the window, accumulated over micro-batches by the shared step's first half."""
    # Under fp16 a scaler at this scale multiplies each loss, as the run's GradScaler would; else scale is 1.
    precision = Precision(bench.config.amp, bench.device, init_scale=scale)
    numbered, weighting = bench.weighted(samples, micro_batch_size)

    def loss(n: tuple[int, tuple[torch.Tensor, ...]]) -> torch.Tensor:
        passed(len(n[1][0]))
        return bench.loss(bench.model, weighting, precision, n)

    accumulate(precision, numbered, loss, weighting.divisor)
    grads = [p.grad / scale if p.grad is not None else torch.zeros_like(p)
             for p in bench.model.parameters() if p.requires_grad]
    bench.model.zero_grad(set_to_none=True)
    return grads


def _gradients_both_ways(bench: _Bench, samples: Samples, progress: Progress) -> tuple[list, list, str]:
    """(big batch, accumulated) gradients, and a note when some were not finite."""
    config, uses_scaler = bench.config, bench.precision.uses_scaler
    # fp16 scales the loss as the GradScaler does, and backs off the same way when it overflows.
    scale, note = (config.init_scale if uses_scaler else 1.0), ""
    done = 0

    def passed(count: int) -> None:
        nonlocal done
        done += count
        progress(done, max(2 * len(samples.x), done))  # an fp16 back-off passes the samples again

    while True:
        big = _window_gradients(bench, samples, len(samples.x), scale, passed)
        accumulated = _window_gradients(bench, samples, config.micro_batch_size, scale, passed)
        broken = " and the ".join(side for side, grads in (("big-batch", big), ("accumulated", accumulated))
                                  if not all(bool(torch.isfinite(g).all()) for g in grads))
        if not broken or not uses_scaler or scale <= 1.0:
            break
        note = note or f"in fp16 the {broken} gradients overflowed to inf/NaN at loss scale {scale:g}"
        scale /= 2
    if broken:
        return big, accumulated, f"the {broken} gradients are not finite (inf/NaN)" + (
            f" even at loss scale {scale:g}" if uses_scaler else "")
    return big, accumulated, note and f"{note}; compared at loss scale {scale:g}, as a GradScaler backs off"


def _difference(name: str, big: torch.Tensor, accumulated: torch.Tensor) -> dict[str, Any]:
    """One table row: how far the accumulated gradient is from the big-batch one."""
    a, b = big.double().flatten(), accumulated.double().flatten()
    norm_a, norm_b, norm_diff = (torch.linalg.vector_norm(v).item() for v in (a, b, a - b))
    rel_l2 = 0.0 if norm_diff == 0 else norm_diff / norm_a if norm_a > 0 else math.inf
    # Two zero gradients point the same way; a zero and a non-zero one do not.
    cosine = (a @ b).item() / (norm_a * norm_b) if norm_a * norm_b > 0 else float(norm_a == norm_b)
    return {"name": name, "shape": "×".join(map(str, big.shape)) or "scalar", "numel": a.numel(),
            "max_abs_diff": (a - b).abs().max().item() if a.numel() else 0.0, "rel_l2": rel_l2, "cosine": cosine}


def _compare(config: RunConfig, progress: Progress) -> GradientReport:
    bench = _Bench(config)
    samples = bench.samples(0, 0, config.effective_batch_size)
    x = samples.x
    big, accumulated, note = _gradients_both_ways(bench, samples, progress)
    names = [name for name, p in bench.model.named_parameters() if p.requires_grad]
    table = _frame([_difference(*row) for row in zip(names, big, accumulated)], COLUMNS)
    # NaN compares False, so a non-finite error counts as a difference.
    differs = ~(table["rel_l2"] < TOLERANCES[config.amp])
    reasons = []
    if differs.any():  # after both gradients: the buffer probe's forward must not move what they start from
        finite = all(bool(torch.isfinite(g).all()) for g in big + accumulated)
        reasons = find_reasons(config, bench.model, x[:config.micro_batch_size], len(x), finite)
    modules = module_table(table, differs, reasons)
    verdict = verdict_text(config, table, modules, reasons) + (f" Note: {note}." if note else "")
    return GradientReport(table, verdict, not differs.any(), modules, tuple(r.name for r in reasons))


def _train_one_step(bench: _Bench, opt: Optimization, model: nn.Module, samples: Samples,
                    micro_batch_size: int) -> float:
    """The shared accumulation step on the window in micro-batches; the window's loss, as the run logs it."""
    numbered, weighting = bench.weighted(samples, micro_batch_size)
    result = accumulate_step(opt, numbered, lambda n: bench.loss(model, weighting, opt.precision, n),
                             weighting.divisor)
    return result.loss_sum.item() / weighting.loss_divisor


def _side_by_side(config: RunConfig, steps: int, progress: Progress) -> pd.DataFrame:
    bench, b, k = _Bench(config), config.micro_batch_size, config.accum_steps
    n = len(bench.train)
    # The engine's schedule length, so warmup and cosine match the real run's first steps.
    total = planned_steps(n, b, k, config.epochs, config.max_steps)
    models = {"big": copy.deepcopy(bench.model), "accumulating": bench.model}
    opts = {side: Optimization.from_config(config, model, bench.device, total) for side, model in models.items()}
    windows = ((epoch, w.micro_batches) for epoch in itertools.count() for w in plan_epoch(n, b, k))
    rows = []
    for step, (epoch, micro) in enumerate(itertools.islice(windows, steps), 1):
        samples = bench.samples(epoch, micro[0].start, micro[-1].stop)
        loss_big = _train_one_step(bench, opts["big"], models["big"], samples, len(samples.x))
        loss_accum = _train_one_step(bench, opts["accumulating"], models["accumulating"], samples, b)
        distance = math.sqrt(sum(torch.sum((p.double() - q.double()) ** 2).item()
                                 for p, q in zip(opts["big"].params, opts["accumulating"].params)))
        rows.append(dict(zip(SIDE_BY_SIDE_COLUMNS, (step, loss_big, loss_accum, distance))))
        progress(step, steps)
    return _frame(rows, SIDE_BY_SIDE_COLUMNS)

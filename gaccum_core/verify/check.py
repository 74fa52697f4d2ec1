"""check_loop: your window on every split of one batch, the gradients compared, and the verdict; the report,
and assert_split_invariant for your own tests."""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch

from gaccum_core.config import ConfigError
from gaccum_core.seeding import isolated_rng
from gaccum_core.train.device import resolve_device
from gaccum_core.train.precision import true_fp32
from gaccum_core.lab.mistakes import MISTAKES
from gaccum_core.lab.verdict import TOLERANCES, batch_norm_why, batch_norms
from gaccum_core.verify.fit import Evidence, Fit, fits, gram, objective_scale, outside_span, scales
from gaccum_core.verify.loop import OBJECTIVE, Batch, VerifyError, batch_size, call_setup, load_loop, to_device
from gaccum_core.verify.report import SplitResult, VerifyReport, report
from gaccum_core.verify.run import Bench, VerifyCancelled
from gaccum_core.verify.splits import Split, check_fixed_k, default_splits, parse_splits, within_fixed_k

FIT_WITHIN = 10  # a mistake fits when its relative residual is under this many times the precision's tolerance
PROBE = 2  # samples run together and alone, to tell a loss that mixes samples from a weighting mistake
MIXING = 1e-3  # at least this far out of its samples' span, a batch gradient comes from a loss that mixes them
Progress = Callable[[int, int], None]  # told (window runs done, runs planned); the plan grows for a diagnosis


def check_loop(window: Callable[..., Any], model: torch.nn.Module, batch: Batch, splits: list[Split] | None = None,
               fixed_k: int | None = None, objective: Callable[..., torch.Tensor] | None = None,
               device: str | torch.device | None = None, on_split: Progress | None = None,
               cancelled: Callable[[], bool] | None = None) -> VerifyReport:
    """Run window(model, micro_batches) on each split of the batch from the same start and compare the gradients;
    diagnose the mistake when they differ. VerifyError on bad input, VerifyCancelled when cancelled() turns true."""
    samples = batch_size(batch)
    _check_fixed_k_parameter(window, fixed_k)
    chosen = _splits(splits, fixed_k, samples)
    if splits is None and batch_norms(model):  # BatchNorm has no batch statistics in a micro-batch of one sample
        chosen = [split for split in chosen if min(split) > 1] or chosen[:1]
    where = _device(device)
    batch = to_device(model, batch, where)
    on = where or _model_device(model)
    with isolated_rng(include_cuda=on.type == "cuda"), true_fp32(on):
        return _Check(Bench(window, model, batch, fixed_k), chosen, on_split, cancelled).run(objective)



def check_file(path: str, setup: str = "setup", window: str = "window", objective: str | None = None,
               splits: str | None = None, fixed_k: int | None = None, device: str | None = None,
               on_split: Progress | None = None, objective_flag: str = "objective") -> VerifyReport:
    """check_loop on FILE.py's window and setup() (the command and the Equivalence page): objective, a name the file
    must define (None: OBJECTIVE where it is defined, named objective_flag in the refusal); splits written as
    --splits writes them (None: the default set); VerifyError in one line."""
    loop = load_loop(path, setup, window, objective or OBJECTIVE)
    if objective and loop.objective is None:
        raise VerifyError(f"{objective_flag}={objective!r} is not allowed: a function {objective} in {path}: it "
                          "defines none")
    model, batch = call_setup(loop)
    chosen = None if splits is None else parse_splits(splits, batch_size(batch))
    return check_loop(loop.window, model, batch, chosen, fixed_k, loop.objective, device, on_split)

def assert_split_invariant(window: Callable[..., Any], model: torch.nn.Module, batch: Batch,
                           **options: Any) -> VerifyReport:
    """check_loop's report; AssertionError with its verdict and fix unless the loop is invariant (and matches
    the objective, where one is given)."""
    result = check_loop(window, model, batch, **options)
    if not result.passed:
        raise AssertionError(f"{result.verdict} Fix: {result.fix}")
    return result


class _Check:
    """One check's runs: every split, the repeat that looks for randomness, and the diagnosis's extra runs."""

    def __init__(self, bench: Bench, splits: list[Split], on_split: Progress | None,
                 cancelled: Callable[[], bool] | None) -> None:
        self.bench, self.splits = bench, splits
        self.on_split, self.cancelled = on_split or (lambda done, total: None), cancelled or (lambda: False)
        self.vectors: list[torch.Tensor] = []
        self.own: dict[tuple[int, int], int] = {}  # (start, size) of a micro-batch -> its own gradient's index
        self.done, self.planned = 0, len(splits) + 1

    def run(self, objective: Callable[..., torch.Tensor] | None) -> VerifyReport:
        """The report of this check (objective: the whole batch's loss the loop means, or None)."""
        first = self._gradient(self.splits[0])
        again = self._gradient(self.splits[0], reset_rng=False)  # the random state moved on: dropout draws anew
        tolerance = TOLERANCES[self.bench.amp]
        if _difference(again, first) > tolerance:
            return report(self.bench, [SplitResult(self.splits[0], _difference(again, first), 1.0)],
                          "nondeterministic", None, tolerance)
        self.vectors.append(first)
        for split in self.splits[1:]:
            self.vectors.append(self._gradient(split))
        differences = [_difference(v, first) for v in self.vectors]
        target = None
        if objective is not None:
            self.planned += 1
            self.vectors.append(self.bench.objective_gradient(objective))
            target = len(self.vectors) - 1
            self._tell()
        invariant = max(differences) <= tolerance
        parts = self._parts() if not invariant else tuple(((i, sum(s)),) for i, s in enumerate(self.splits))
        evidence = Evidence(gram(self.vectors), tuple(range(len(self.splits))), parts, target, self.bench.fixed_k)
        scale = scales(evidence, target if target is not None else 0)
        results = [SplitResult(s, d, c) for s, d, c in zip(self.splits, differences, scale)]
        matches = None if target is None else invariant and _difference(first, self.vectors[target]) <= tolerance
        fit = self._diagnose(evidence, invariant, matches, tolerance)
        return report(self.bench, results, fit.mistake if fit else None, fit, tolerance, matches)

    def _diagnose(self, evidence: Evidence, invariant: bool, matches: bool | None, tolerance: float) -> Fit | None:
        """The best-fitting mistake (split_dependent when none fits), constant_scale, or None when the loop passes."""
        if invariant:
            if matches is False:
                scaled = objective_scale(evidence)
                return scaled if scaled.residual <= FIT_WITHIN * tolerance else None
            return None
        best = fits(evidence)[0]
        norms = batch_norms(self.bench.model)
        if norms:
            return Fit("split_dependent", best.residual, None, batch_norm_why(norms))
        outside, which = self._outside_samples(evidence)
        if outside > max(FIT_WITHIN * tolerance, MIXING):
            return Fit("split_dependent", outside, None, f"{which} gradient lies {outside:.2g} (relative) outside the "
                       "span of their own one by one, so the loss mixes samples")
        if best.residual > FIT_WITHIN * tolerance:  # none fits: another weighting, unless mixing went unmeasured
            return Fit("unknown_weighting" if which else "split_dependent", best.residual, None,
                       f"no known mistake fits: the best, {MISTAKES[best.mistake].name}, leaves a relative residual "
                       f"of {best.residual:.2g}")
        return best

    def _outside_samples(self, evidence: Evidence) -> tuple[float, str]:
        """How far a micro-batch's gradient lies outside the span of its samples' own (the whole batch's when each
        sample ran alone, else the first PROBE samples'), and whose; 0 when too few parameters tell."""
        samples = sum(self.splits[0])
        for size, whose in ((samples, "the whole batch's"), (PROBE, f"the first {PROBE} samples' joint")):
            members, joint = [self.own.get((i, 1)) for i in range(size)], self.own.get((0, size))
            if joint is not None and None not in members and sum(p.numel() for p in self.bench.params) > 2 * size:
                return outside_span(evidence, joint, members), whose
        return 0.0, ""

    def _parts(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """Per split, each micro-batch's own one-batch gradient (an extra run each, shared by equal micro-batches)."""
        own = self.own = {(0, sum(split)): i for i, split in enumerate(self.splits) if len(split) == 1}
        needed = {(sum(split[:j]), size) for split in self.splits for j, size in enumerate(split)}
        if not batch_norms(self.bench.model):  # the probe of mixing: two samples together, and each alone
            needed |= {(0, PROBE), *((i, 1) for i in range(PROBE))}
        needed -= set(own)
        self.planned += len(needed)
        for start, size in sorted(needed):
            self.vectors.append(self._gradient((size,), start))
            own[start, size] = len(self.vectors) - 1
        return tuple(tuple((own[sum(split[:j]), size], size) for j, size in enumerate(split)) for split in self.splits)

    def _gradient(self, split: Split, start: int = 0, reset_rng: bool = True) -> torch.Tensor:
        if self.cancelled():
            raise VerifyCancelled("verify was cancelled")
        vector = self.bench.gradient(split, start, reset_rng)
        self._tell()
        return vector

    def _tell(self) -> None:
        self.done += 1
        self.on_split(self.done, max(self.planned, self.done))


def _difference(vector: torch.Tensor, reference: torch.Tensor) -> float:
    """The relative max-abs difference: max |vector − reference| / max |reference|."""
    scale = float(reference.abs().max())
    if scale == 0:
        raise VerifyError("the window's gradient on the first split is zero everywhere: nothing to compare")
    return float((vector - reference).abs().max()) / scale


def _splits(splits: list[Split] | None, fixed_k: int | None, samples: int) -> list[Split]:
    """The splits to try: the given ones (checked) or the default set, within fixed_k micro-batches."""
    if fixed_k is not None and (isinstance(fixed_k, bool) or not isinstance(fixed_k, int) or fixed_k < 1):
        raise VerifyError(f"fixed_k={fixed_k!r} is not allowed: an integer ≥ 1, the micro-batches per window")
    if splits is None:
        chosen = default_splits(samples)
        return chosen if fixed_k is None else within_fixed_k(chosen, fixed_k, samples)
    chosen = [tuple(split) for split in splits]
    wrong = [s for s in chosen if not s or min(s) < 1 or sum(s) != samples]
    if not chosen or wrong:
        raise VerifyError(f"splits={chosen!r} is not allowed: micro-batch sizes ≥ 1 adding up to the batch's "
                          f"{samples} samples, in at least one split")
    if fixed_k is not None:
        check_fixed_k(chosen, fixed_k)
    return list(dict.fromkeys(chosen))


def _check_fixed_k_parameter(window: Callable[..., Any], fixed_k: int | None) -> None:
    """VerifyError when the window requires a fixed_k that is not given, or is given one it does not take."""
    try:
        parameters = inspect.signature(window).parameters
    except (TypeError, ValueError):  # no signature to read: the call itself will tell
        return
    taken = parameters.get("fixed_k")
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    if fixed_k is None and taken is not None and taken.default is inspect.Parameter.empty:
        raise VerifyError("fixed_k=None is not allowed: the window takes fixed_k, the configured micro-batches per "
                          "step (--fixed-k K)")
    if fixed_k is not None and taken is None and not takes_any:
        raise VerifyError(f"fixed_k={fixed_k!r} is not allowed: the window takes no fixed_k parameter "
                          "(window(model, micro_batches, fixed_k) receives it)")


def _device(device: str | torch.device | None) -> torch.device | None:
    if device is None or isinstance(device, torch.device):
        return device
    try:
        return resolve_device(device)
    except ConfigError as exc:
        raise VerifyError(str(exc)) from None


def _model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters(), torch.empty(0)).device


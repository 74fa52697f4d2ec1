"""A memory plan: for a target effective batch E and a memory budget, the largest micro-batch that fits
per option combination (measured, see probe.py), and the fastest setting that fits with a margin.

The CLI's `plan` command, `run --micro-batch-size auto` and the Plan page all call make_plan().
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from gaccum_core.config import AMP_MODES, CLEAR_CACHE_MODES, COMPILE_MODES, ConfigError, RunConfig
from gaccum_core.data import load_data
from gaccum_core.plan.probe import measure
from gaccum_core.plan.search import (MARGIN, UNAVAILABLE, Candidate, Options, best_fit, combinations,
                                     most_measurements, reason, recommend, search)
from gaccum_core.train.device import option_unavailable, resolve_device

MAX_EFFECTIVE_BATCH = 1 << 20
# Where Plan.memory_source's peak comes from, in words for the CLI and the page.
MEMORY_SOURCES = {
    "allocator": "the CUDA allocator's peak (max_memory_allocated) over one optimizer step",
    "counted": "counted training memory (weights + gradients + optimizer state + activations over one "
               "optimizer step): on the CPU the process's resident memory is mostly the interpreter and libraries",
}

# (measured so far, at most in all, the candidate just measured, seconds so far)
Progress = Callable[[int, int, Candidate | None, float], None]


@dataclass(frozen=True)
class PlanRequest:
    """What to plan: the run (model, data, optimizer), the effective batch, the budget, the options to cross."""

    base: RunConfig
    effective_batch: int
    budget_mb: float
    amp: tuple[str, ...] = ("off",)
    clear_cache: tuple[str, ...] = ("off",)
    compile: tuple[str, ...] = ("off",)
    timed_steps: int = 2
    margin: float = MARGIN

    def __post_init__(self) -> None:
        if type(self.effective_batch) is not int or not 1 <= self.effective_batch <= MAX_EFFECTIVE_BATCH:
            raise ConfigError("effective_batch", self.effective_batch, f"an integer from 1 to {MAX_EFFECTIVE_BATCH}")
        if type(self.budget_mb) not in (int, float) or not (math.isfinite(self.budget_mb) and self.budget_mb > 0):
            raise ConfigError("memory_budget_mb", self.budget_mb, "a number of megabytes > 0")
        for name, allowed in (("amp", AMP_MODES), ("clear_cache", CLEAR_CACHE_MODES), ("compile", COMPILE_MODES)):
            values = getattr(self, name)
            bad = [v for v in values if v not in allowed]
            if not values or bad or len(set(values)) != len(values):
                raise ConfigError(name, ",".join(values), "one or more of " + ", ".join(allowed) + ", each once")
        if not 1 <= self.timed_steps <= 100:
            raise ConfigError("timed_steps", self.timed_steps, "an integer from 1 to 100")
        if not 0 <= self.margin < 1:
            raise ConfigError("margin", self.margin, "a fraction from 0 to below 1")

    @property
    def options(self) -> list[Options]:
        """Every option combination, plain fp32 first."""
        return combinations(self.amp, self.clear_cache, self.compile)


def default_request(budget_mb: float = 32.0) -> PlanRequest:
    """The plan the Plan page opens with and bench/bench_plan.py measures: the Train page's cnn on 32×32
    fake images, E=256, fp32 against bf16 and cache clearing off against per step, in 32 MB (where
    fp32 at b=256 does not fit and bf16 does)."""
    base = RunConfig(model="cnn", dataset="fake", image_size=32, micro_batch_size=1, accum_steps=1)
    return PlanRequest(base, 256, budget_mb, amp=("off", "bf16"), clear_cache=("off", "step"))


@dataclass
class Plan:
    """A finished plan: every measured candidate, the recommendation and why."""

    request: PlanRequest
    device: str
    memory_source: str  # "allocator" (CUDA's max_memory_allocated) or "counted" (the CPU)
    candidates: list[Candidate] = field(default_factory=list)
    recommended: Candidate | None = None
    reason: str = ""
    seconds: float = 0.0

    def rows(self) -> list[dict[str, Any]]:
        """One flat row per candidate, in the order measured."""
        return [c.row() for c in self.candidates]

    def largest_fitting(self) -> dict[str, int | None]:
        """Per option combination label, the largest b that fitted (None when none did)."""
        fits = {o: best_fit(c for c in self.candidates if c.options == o) for o in self.request.options}
        return {o.label(): c.micro_batch_size if c else None for o, c in fits.items()}

    def to_dict(self) -> dict[str, Any]:
        """The plan as one JSON-ready object (the CLI's --json, plan.json in a run directory)."""
        choice = self.recommended
        return {
            "effective_batch": self.request.effective_batch, "memory_budget_mb": self.request.budget_mb,
            "margin": self.request.margin, "device": self.device, "memory_source": self.memory_source,
            "model": self.request.base.model, "dataset": self.request.base.dataset,
            "image_size": self.request.base.image_size, "optimizer": self.request.base.optimizer,
            "micro_batch_size": choice.micro_batch_size if choice else None,
            "accum_steps": choice.accum_steps if choice else None,
            "options": {"amp": choice.options.amp, "clear_cache": choice.options.clear_cache,
                        "compile": choice.options.compile} if choice else None,
            "reason": self.reason, "largest_fitting": self.largest_fitting(),
            "seconds": self.seconds, "rows": self.rows(),
        }


def default_budget_mb(device: torch.device, margin: float = MARGIN) -> float | None:
    """On CUDA the device's free memory less the margin; None on the CPU, where the user must choose."""
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    return free * (1 - margin) / (1024 * 1024)


def make_plan(request: PlanRequest, progress: Progress | None = None) -> Plan:
    """Measure every option combination's candidates and recommend one; never raises for a candidate."""
    start = time.perf_counter()
    device = resolve_device(request.base.device)
    largest = len(load_data(request.base).train)
    plan = Plan(request, str(device), "allocator" if device.type == "cuda" else "counted")
    combos = request.options
    at_most = len(combos) * most_measurements(request.effective_batch, largest)

    def measured(options: Options, b: int) -> Candidate:
        candidate = measure(request.base, options, b, request.effective_batch, request.budget_mb, request.timed_steps)
        plan.candidates.append(candidate)
        if progress is not None:
            progress(len(plan.candidates), max(at_most, len(plan.candidates)), candidate, time.perf_counter() - start)
        return candidate

    for options in combos:
        why = option_unavailable(device, options.amp, options.compile)
        if why is not None:
            plan.candidates.append(Candidate(options, 0, 0, UNAVAILABLE, detail={"message": why}))
            at_most -= most_measurements(request.effective_batch, largest)
            continue
        search(request.effective_batch, options, measured, largest)
    plan.recommended = recommend(plan.candidates, request.budget_mb, request.margin)
    plan.reason = reason(plan.recommended, plan.candidates, request.budget_mb, request.margin)
    plan.seconds = time.perf_counter() - start
    return plan


def config_from_plan(base: RunConfig, plan: Plan) -> RunConfig:
    """The base run with the recommended micro-batch, accumulation steps and options (world size 1)."""
    choice = plan.recommended
    if choice is None:
        raise ConfigError("micro_batch_size", "auto", plan.reason)
    return base.replace(micro_batch_size=choice.micro_batch_size, accum_steps=choice.accum_steps,
                        amp=choice.options.amp, clear_cache=choice.options.clear_cache,
                        compile=choice.options.compile)

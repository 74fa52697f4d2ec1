"""A memory plan: for a target effective batch E and a memory budget, the largest micro-batch that fits
per option combination (measured around where the memory line predicts the budget falls, see search.py
and probe.py), the sizes near it timed until their speed is known, and the recommendation (ranking.py).

The CLI's `plan` command, `run --micro-batch-size auto` and the Plan page all call make_plan().
"""

from __future__ import annotations

import gc
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from gaccum_core.config import AMP_MODES, CLEAR_CACHE_MODES, COMPILE_MODES, ConfigError, RunConfig
from gaccum_core.data import load_data
from gaccum_core.plan.probe import measure, time_speeds
from gaccum_core.plan.progress import Tally
from gaccum_core.plan.ranking import reason, recommend
from gaccum_core.plan.search import (MARGIN, TIMED_PER_OPTIONS, UNAVAILABLE, Candidate, Options, best_fit,
                                     combinations, hint_points, search, timing_sizes, typical_probes, within)
from gaccum_core.plan.speed import PRECISION, Timing
from gaccum_core.train.device import option_unavailable, resolve_device

MAX_EFFECTIVE_BATCH = 1 << 20
# Where Plan.memory_source's peak comes from, in words for the CLI and the page.
MEMORY_SOURCES = {
    "allocator": "the CUDA allocator's peak (max_memory_allocated) over one optimizer step",
    "counted": "counted training memory (weights + gradients + optimizer state + activations over one "
               "optimizer step): on the CPU the process's resident memory is mostly the interpreter and libraries",
}

# (memory probes and timed steps so far, about how many in all, the candidate just measured or stepped
# (with its speed so far), seconds so far)
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
    timed_steps: int = 20  # at most, per timed candidate
    margin: float = MARGIN
    time_cap_s: float = 0.6  # seconds of timed steps per candidate, unless its speed is known sooner
    precision: float = PRECISION  # the speed is known when its 95% interval is within this share

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
        if type(self.timed_steps) is not int or not 1 <= self.timed_steps <= 100:
            raise ConfigError("timed_steps", self.timed_steps, "an integer from 1 to 100")
        if not (type(self.time_cap_s) in (int, float) and 0 < self.time_cap_s <= 600):
            raise ConfigError("time_cap_s", self.time_cap_s, "seconds from above 0 to 600")
        if not (type(self.precision) in (int, float) and 0 < self.precision < 1):
            raise ConfigError("precision", self.precision, "a fraction above 0 and below 1, e.g. 0.05")
        if not 0 <= self.margin < 1:
            raise ConfigError("margin", self.margin, "a fraction from 0 to below 1")

    @property
    def options(self) -> list[Options]:
        """Every option combination, plain fp32 first."""
        return combinations(self.amp, self.clear_cache, self.compile)

    @property
    def timing(self) -> Timing:
        """When each timed candidate's timing stops."""
        return Timing(self.precision, self.time_cap_s, self.timed_steps)


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
            "margin": self.request.margin, "precision": self.request.precision,
            "time_cap_s": self.request.time_cap_s, "device": self.device, "memory_source": self.memory_source,
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
    """Measure each option combination around its budget line, then time the sizes near each line in
    turns, and recommend one; never raises for a candidate."""
    start = time.perf_counter()
    device = resolve_device(request.base.device)
    largest = len(load_data(request.base).train)
    plan = Plan(request, str(device), "allocator" if device.type == "cuda" else "counted")
    tally = Tally(typical_probes(request.effective_batch, largest), len(request.options), TIMED_PER_OPTIONS,
                  request.timing)

    def report(candidate: Candidate) -> None:
        if progress is not None:
            progress(tally.done, tally.about(), candidate, time.perf_counter() - start)

    def probed(candidate: Candidate) -> None:
        tally.probed()
        report(candidate)

    def stepped(index: int, candidate: Candidate, finished: bool) -> None:
        tally.stepped(index, candidate, finished)
        report(candidate)

    with _collections_of_the_plan_only():
        to_time: list[Candidate] = []
        for options in request.options:
            why = option_unavailable(device, options.amp, options.compile)
            if why is not None:
                plan.candidates.append(Candidate(options, 0, 0, UNAVAILABLE, detail={"message": why}))
            else:
                to_time += _search_options(plan, options, largest, probed)
            tally.searched()
        tally.timing_starts(len(to_time))
        for before, after in zip(to_time, time_speeds(request.base, to_time, request.effective_batch,
                                                      request.timing, stepped)):
            plan.candidates[plan.candidates.index(before)] = after
    plan.recommended = recommend(plan.candidates, request.budget_mb, request.margin, request.precision)
    plan.reason = reason(plan.recommended, plan.candidates, request.budget_mb, request.margin, request.precision)
    plan.seconds = time.perf_counter() - start
    return plan


def _search_options(plan: Plan, options: Options, largest: int, probed: Callable[[Candidate], None]) -> list[Candidate]:
    """One combination's memory: the largest size within the budget, then within the margin (usually
    measured by then), then the sizes to time, each measured first; returns those within the margin."""
    request = plan.request
    effective, budget, safe = request.effective_batch, request.budget_mb, (1 - request.margin) * request.budget_mb

    def measured(opts: Options, b: int) -> Candidate:
        plan.candidates.append(measure(request.base, opts, b, effective, budget))
        probed(plan.candidates[-1])
        return plan.candidates[-1]

    search(effective, options, measured, budget, largest, plan.candidates, hint_points(plan.candidates, options))
    search(effective, options, measured, safe, largest, known=plan.candidates)
    to_time = []
    for b in timing_sizes(effective, plan.candidates, options, budget, request.margin, largest):
        mine = [c for c in plan.candidates if c.options == options and c.micro_batch_size == b]
        candidate = mine[0] if mine else measured(options, b)
        if within(candidate, safe):
            to_time.append(candidate)
    return to_time


@contextmanager
def _collections_of_the_plan_only() -> Iterator[None]:
    """gc.freeze() for the plan: clearing the cache (per candidate, and per step with clear_cache=step)
    then collects what the plan made, not a whole server's heap (~0.3 s each in a process holding torch,
    pandas and streamlit); the heap is unfrozen after. Left alone when someone froze it already."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def config_from_plan(base: RunConfig, plan: Plan) -> RunConfig:
    """The base run with the recommended micro-batch, accumulation steps and options (world size 1)."""
    choice = plan.recommended
    if choice is None:
        raise ConfigError("micro_batch_size", "auto", plan.reason)
    return base.replace(micro_batch_size=choice.micro_batch_size, accum_steps=choice.accum_steps,
                        amp=choice.options.amp, clear_cache=choice.options.clear_cache,
                        compile=choice.options.compile)

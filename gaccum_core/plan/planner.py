"""A memory plan: for a target effective batch E and a memory budget, the largest micro-batch that fits
per option combination (measured around where the memory line predicts the budget falls, see search.py
and probe.py), the sizes near it timed until their speed is known, and the recommendation (ranking.py).

The CLI's `plan` command, `run --micro-batch-size auto` and the Plan page all call make_plan().
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import math
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from gaccum_core.config import AC_MODES, AMP_MODES, CLEAR_CACHE_MODES, COMPILE_MODES, ConfigError, RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.models.build import build_seeded_model
from gaccum_core.plan.modes import choose
from gaccum_core.plan.probe import free_cores, measure, threads_for_the_cpu, time_speeds
from gaccum_core.plan.progress import Tally
from gaccum_core.plan.search import (MARGIN, TIMED_PER_OPTIONS, UNAVAILABLE, Candidate, Options, best_fit,
                                     combinations, hint_points, mb, search, timing_sizes, typical_probes, within)
from gaccum_core.plan.sharding import DDP, SHARDING_MODES, Layout, layout, run_fields, sharded_candidate
from gaccum_core.plan.speed import PRECISION, Timing
from gaccum_core.train.device import gpu_count, memory_info, option_unavailable, resolve_device
from gaccum_core.train.gpus import DeviceFacts, look, visible_gpus

MAX_EFFECTIVE_BATCH = 1 << 20
MAX_WORLD_SIZE = 4096
# Where Plan.memory_source's peak comes from, in words for the CLI and the page.
MEMORY_SOURCES = {
    "allocator": "the CUDA allocator's peak (max_memory_allocated) over one optimizer step",
    "counted": "counted training memory (weights + gradients + optimizer state + activations over one "
               "optimizer step): on the CPU the process's resident memory is mostly the interpreter and libraries",
}
SHARDED_SOURCE = ("fsdp/every and fsdp/last are counted per rank from one process's parts at the same b (weights, "
                  "gradients and optimizer state 1/{n}, the largest units' weights gathered while they compute, "
                  "fsdp/last's whole gradient kept between micro-batches), not timed: one process cannot time a "
                  "collective of {n} ranks")

# (memory probes and timed steps so far, about how many in all, the candidate just measured or stepped
# (with its speed so far), seconds so far)
Progress = Callable[[int, int, Candidate | None, float], None]


@dataclass(frozen=True)
class PlanRequest:
    """What to plan: the run (model, data, optimizer), the effective batch E over world_size ranks (each
    trains E / world_size per step), the budget per rank, the options to cross."""

    base: RunConfig
    effective_batch: int
    budget_mb: float
    amp: tuple[str, ...] = ("off",)
    clear_cache: tuple[str, ...] = ("off",)
    compile: tuple[str, ...] = ("off",)
    sharding: tuple[str, ...] = (DDP,)  # ddp, fsdp/every, fsdp/last: the sharded ones need world_size > 1
    world_size: int = 1
    timed_steps: int = 20  # at most, per timed candidate
    margin: float = MARGIN
    time_cap_s: float = 0.6  # seconds of timed steps per candidate, unless its speed is known sooner
    precision: float = PRECISION  # the speed is known when its 95% interval is within this share
    activation_checkpointing: tuple[str, ...] = ("off",)  # off, selective (the base's ac_every), full

    def __post_init__(self) -> None:
        if type(self.effective_batch) is not int or not 1 <= self.effective_batch <= MAX_EFFECTIVE_BATCH:
            raise ConfigError("effective_batch", self.effective_batch, f"an integer from 1 to {MAX_EFFECTIVE_BATCH}")
        if type(self.budget_mb) not in (int, float) or not (math.isfinite(self.budget_mb) and self.budget_mb > 0):
            raise ConfigError("memory_budget_mb", self.budget_mb, "a number of megabytes > 0")
        for name, allowed in (("amp", AMP_MODES), ("clear_cache", CLEAR_CACHE_MODES), ("compile", COMPILE_MODES),
                              ("sharding", SHARDING_MODES), ("activation_checkpointing", AC_MODES)):
            values = getattr(self, name)
            bad = [v for v in values if v not in allowed]
            if not values or bad or len(set(values)) != len(values):
                raise ConfigError(name, ",".join(values), "one or more of " + ", ".join(allowed) + ", each once")
        self._check_ranks()
        if type(self.timed_steps) is not int or not 1 <= self.timed_steps <= 100:
            raise ConfigError("timed_steps", self.timed_steps, "an integer from 1 to 100")
        if not (type(self.time_cap_s) in (int, float) and 0 < self.time_cap_s <= 600):
            raise ConfigError("time_cap_s", self.time_cap_s, "seconds from above 0 to 600")
        if not (type(self.precision) in (int, float) and 0 < self.precision < 1):
            raise ConfigError("precision", self.precision, "a fraction above 0 and below 1, e.g. 0.05")
        if not 0 <= self.margin < 1:
            raise ConfigError("margin", self.margin, "a fraction from 0 to below 1")

    def _check_ranks(self) -> None:
        """The world size, and the sharded modes only over several ranks, E split evenly between them."""
        if type(self.world_size) is not int or not 1 <= self.world_size <= MAX_WORLD_SIZE:
            raise ConfigError("nproc", self.world_size, f"an integer from 1 to {MAX_WORLD_SIZE}")
        if self.world_size == 1 and self.sharding != (DDP,):
            raise ConfigError("sharding", ",".join(self.sharding), "ddp with one process (fsdp shards over "
                                                                   "processes: set nproc to 2 or more)")
        if self.effective_batch % self.world_size:
            raise ConfigError("effective_batch", self.effective_batch,
                              f"a multiple of the {self.world_size} processes, each planned for E / processes")

    @property
    def per_rank_batch(self) -> int:
        """E / world_size: the samples each rank trains per optimizer step (b·k)."""
        return self.effective_batch // self.world_size

    @property
    def options(self) -> list[Options]:
        """Every option combination, plain fp32 first."""
        return combinations(self.amp, self.clear_cache, self.compile, self.sharding, self.activation_checkpointing)

    @property
    def timing(self) -> Timing:
        """When each timed candidate's timing stops."""
        return Timing(self.precision, self.time_cap_s, self.timed_steps)

    @property
    def probe_count(self) -> int:
        """About how many memory probes the plan makes: the typical count per unsharded combination (a sharded
        mode is counted from the same probes; only sharded modes asked: per combination)."""
        unsharded = [o for o in self.options if o.sharding == DDP] or self.options
        return len(unsharded) * typical_probes(self.per_rank_batch)

    @property
    def timed_count(self) -> int:
        """How many sizes the plan times: TIMED_PER_OPTIONS per unsharded combination (one process cannot
        time a sharded mode's collectives)."""
        return sum(o.sharding == DDP for o in self.options) * TIMED_PER_OPTIONS

    def work_words(self) -> str:
        """What the plan will measure, in one sentence, said before anything is measured."""
        combos = self.options
        ranks = f" over {self.world_size} ranks, E / N = {self.per_rank_batch} each" if self.world_size > 1 else ""
        sharded = any(o.sharding != DDP for o in combos)
        return (f"Plan crosses {len(combos)} option combination{'s' * (len(combos) != 1)}{ranks}: "
                f"{', '.join(o.label() for o in combos)}: about {self.probe_count} memory probes, then "
                f"{self.timed_count} sizes timed in turns, about {self.time_cap_s:g} s each."
                + (" The fsdp modes are counted per rank from the same probes, not timed." if sharded else ""))


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

    def memory_words(self) -> str:
        """Where the peaks come from, in words: the source, and how the sharded modes are counted."""
        words = MEMORY_SOURCES[self.memory_source]
        if any(mode != DDP for mode in self.request.sharding):
            words += "; " + SHARDED_SOURCE.format(n=self.request.world_size)
        return words

    def title(self) -> str:
        """'cnn on fake, E=256, budget 32 MB, sgd, on cpu': what was planned, over how many ranks, where."""
        asked = self.request
        ranks, per_rank = (f" over {asked.world_size} ranks", " per rank") if asked.world_size > 1 else ("", "")
        return (f"{asked.base.model} on {asked.base.dataset}, E={asked.effective_batch}{ranks}, "
                f"budget {mb(asked.budget_mb)}{per_rank}, {asked.base.optimizer}, on {self.device}")

    def done_words(self) -> str:
        """'done: 12 candidates measured, 4 of them timed, in 3.2 s'."""
        timed = sum(c.timed_steps is not None for c in self.candidates)
        return f"done: {len(self.candidates)} candidates measured, {timed} of them timed, in {self.seconds:.1f} s"

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
            "effective_batch": self.request.effective_batch, "world_size": self.request.world_size,
            "memory_budget_mb": self.request.budget_mb,
            "margin": self.request.margin, "precision": self.request.precision,
            "time_cap_s": self.request.time_cap_s, "device": self.device, "memory_source": self.memory_source,
            "memory_words": self.memory_words(),
            "model": self.request.base.model, "dataset": self.request.base.dataset,
            "image_size": self.request.base.image_size, "optimizer": self.request.base.optimizer,
            "micro_batch_size": choice.micro_batch_size if choice else None,
            "accum_steps": choice.accum_steps if choice else None,
            "options": dataclasses.asdict(choice.options) if choice else None,
            "reason": self.reason, "largest_fitting": self.largest_fitting(),
            "seconds": self.seconds, "rows": self.rows(),
        }


def default_budget_mb(device: torch.device, margin: float = MARGIN, facts: DeviceFacts | None = None) -> float | None:
    """On CUDA the GPU's whole memory less the margin, the same whether a run goes or not (a plan measures once the
    device queue gave it the GPU, when no run of gaccum's holds memory there); None on the CPU, where the user
    chooses. The total is nvidia-smi's (facts: one look, gpus.look), read without a CUDA context here; torch's
    where nvidia-smi lists none."""
    if device.type != "cuda":
        return None
    facts = facts or look(gpu_count())
    gpus = visible_gpus(facts.gpus, facts.visible_spec)
    gpu = gpus[device.index or 0] if (device.index or 0) < len(gpus) else None
    total = gpu.total if gpu is not None and gpu.total else memory_info(device)[1]
    return total * (1 - margin) / (1024 * 1024)


def make_plan(request: PlanRequest, progress: Progress | None = None) -> Plan:
    """Measure each option combination around its budget line (a sharded mode counted per rank from the
    same single-process probes), then time the unsharded sizes near each line in turns, and recommend one;
    never raises for a candidate."""
    start = time.perf_counter()
    device = resolve_device(request.base.device)
    data = load_data(request.base)
    largest = len(data.train)
    plan = Plan(request, str(device), "allocator" if device.type == "cuda" else "counted")
    tally = Tally(typical_probes(request.per_rank_batch, largest), len(request.options), TIMED_PER_OPTIONS,
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

    with _collections_of_the_plan_only(), threads_for_the_cpu(device):
        shape = None if request.sharding == (DDP,) else layout(
            build_seeded_model(request.base, data.input_shape, data.num_classes))
        probes = _Probes(plan, shape, probed)
        to_time: list[Candidate] = []
        for options in request.options:
            why = option_unavailable(device, options.amp, options.compile) or _sharding_unavailable(options)
            if why is not None:
                plan.candidates.append(Candidate(options, 0, 0, UNAVAILABLE, detail={"message": why}))
            else:
                to_time += _search_options(plan, options, largest, probes)
            tally.searched()
        probes.fill_in()
        tally.timing_starts(len(to_time))
        for before, after in zip(to_time, time_speeds(request.base, to_time, request.per_rank_batch,
                                                      request.timing, stepped)):
            plan.candidates[plan.candidates.index(before)] = after
    plan.recommended, plan.reason = choose(plan.candidates, request.budget_mb, request.world_size, request.margin,
                                           request.precision)
    if device.type == "cpu" and to_time:
        plan.reason += busy_words()
    plan.seconds = time.perf_counter() - start
    return plan


def busy_words() -> str:
    """' The machine was busy while the sizes were timed (load 2.9 on 2 cores): ...' when more processes wanted
    the CPU than it has cores (the last minute's load average); '' otherwise or where there is no load average.
    On such a machine a step's speed follows the others' work: measured on a 2-core box under two busy
    processes, identical settings timed 20% apart and five plans recommended three different settings."""
    free = free_cores()
    if free is None or free >= 0:
        return ""
    cores = os.cpu_count() or 1
    load = cores - free
    return (f" The machine was busy while the sizes were timed (load {load:.1f} on {cores} cores): their speeds "
            "followed the other work, so this recommendation may change; plan again when it is quieter.")


def _sharding_unavailable(options: Options) -> str | None:
    """Why a sharded mode cannot have these options (gaccum does not compile sharded models), else None."""
    if options.sharding != DDP and options.compile != "off":
        return f"{options.sharding} with compile {options.compile}: gaccum does not compile sharded models"
    return None


class _Probes:
    """The plan's single-process memory probes, each once: a ddp candidate is one, a sharded mode's candidate
    is counted per rank from the one at the same b (probed when it is not yet)."""

    def __init__(self, plan: Plan, shape: Layout | None, probed: Callable[[Candidate], None]) -> None:
        self.plan, self.shape, self.probed = plan, shape, probed
        self.single: dict[tuple[Options, int], Candidate] = {}

    def one_process(self, options: Options, b: int) -> Candidate:
        """The single-process probe of these options (unsharded) at b."""
        key = (options.unsharded(), b)
        if key not in self.single:
            request = self.plan.request
            self.single[key] = measure(request.base, key[0], b, request.per_rank_batch, request.budget_mb)
            self.probed(self.single[key])
        return self.single[key]

    def candidate(self, options: Options, b: int) -> Candidate:
        """The candidate of these options at b: the probe itself for ddp, else counted per rank from it."""
        one = self.one_process(options, b)
        if options.sharding == DDP:
            return one
        return sharded_candidate(one, options, self.shape, self.plan.request.world_size, self.plan.request.budget_mb)

    def known(self, options: Options) -> list[Candidate]:
        """The candidates of these options already known from the probes made so far, added to the plan."""
        have = {c.micro_batch_size for c in self.plan.candidates if c.options == options}
        new = [self.candidate(options, b) for (o, b) in sorted(self.single, key=lambda k: k[1])
               if o == options.unsharded() and b not in have]
        self.plan.candidates += new
        return new

    def fill_in(self) -> None:
        """Every requested combination at every b probed for its unsharded options: per-rank memory of each
        mode side by side (no new probe)."""
        for options in self.plan.request.options:
            if any(c.options == options and c.status == UNAVAILABLE for c in self.plan.candidates):
                continue
            self.known(options)


def _search_options(plan: Plan, options: Options, largest: int, probes: _Probes) -> list[Candidate]:
    """One combination's memory: the largest size within the budget, then within the margin (usually
    measured by then), then the sizes to time, each measured first; returns those within the margin (none for
    a sharded mode: one process cannot time its collectives)."""
    request = plan.request
    effective, budget, safe = request.per_rank_batch, request.budget_mb, (1 - request.margin) * request.budget_mb

    def measured(opts: Options, b: int) -> Candidate:
        plan.candidates.append(probes.candidate(opts, b))
        return plan.candidates[-1]

    probes.known(options)
    search(effective, options, measured, budget, largest, plan.candidates, hint_points(plan.candidates, options))
    search(effective, options, measured, safe, largest, known=plan.candidates)
    if options.sharding != DDP:
        return []
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
    pandas and streamlit); the heap is unfrozen after. Left alone when someone froze it already. What the
    plan's first optimizer step imports, torch._dynamo (~135,000 objects), is imported before the freeze: after
    it, every collection walked it (80-90 ms a call on a busy 2-core box, 29% of a command line plan's time)."""
    if gc.get_freeze_count():
        yield
        return
    importlib.import_module("torch._dynamo")
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def config_from_plan(base: RunConfig, plan: Plan) -> RunConfig:
    """The base run with the recommended micro-batch, accumulation steps, options and sharding, over the plan's
    ranks (the base's own processes when they are as many, else nproc of them on one node)."""
    choice = plan.recommended
    if choice is None:
        raise ConfigError("micro_batch_size", "auto", plan.reason)
    ranks = {} if base.world_size == plan.request.world_size else {"nproc": plan.request.world_size, "nnodes": 1}
    return base.replace(micro_batch_size=choice.micro_batch_size, accum_steps=choice.accum_steps,
                        amp=choice.options.amp, clear_cache=choice.options.clear_cache,
                        compile=choice.options.compile,
                        activation_checkpointing=choice.options.activation_checkpointing,
                        **run_fields(choice.options.sharding), **ranks)

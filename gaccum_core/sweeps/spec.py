"""A sweep's spec: the settings crossed (the grid), the settings every run shares, the repeats; the
cells and runs it expands to, and the id that names it on disk. Pure: no I/O, no device."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from gaccum_core.config import ConfigError, RunConfig, fields_with

FIELDS = tuple(f.name for f in dataclasses.fields(RunConfig))
KINDS = {f.name: f.type if isinstance(f.type, str) else f.type.__name__ for f in dataclasses.fields(RunConfig)}
AXES = fields_with("cross")  # the fields a sweep may cross: not where a run runs or reads, nor what it writes
_TRUE, _FALSE = ("true", "on", "yes", "1"), ("false", "off", "no", "0")
MAX_REPEATS = 1000
MAX_RUNS = 10_000  # far beyond any sweep one machine runs; catches a grid typed wrong before it is expanded
_PLAIN = RunConfig()  # the dataclass's own defaults: settings equal to them do not enter the id
NAME_PREFIX = "sweep-"
_NAME_RE = re.compile(r"^sweep-([0-9a-f]{10})-c(\d+)-r(\d+)$")


@dataclass(frozen=True)
class SweepSpec:
    """What a sweep runs: every combination of the grid's values (a cell), each `repeats` times.

    grid: (field, values) per crossed RunConfig field, in the order given. common: every other setting
    (a RunConfig field's value shared by every run). effective_batch: when set, each cell's accum_steps
    is derived from it (E = N·b·k). repeats: the seeds seed, seed+1, … (same_seed: the same seed each
    time, to measure timing noise alone)."""

    grid: tuple[tuple[str, tuple[Any, ...]], ...]
    common: tuple[tuple[str, Any], ...] = ()
    repeats: int = 1
    same_seed: bool = False
    effective_batch: int | None = None

    def __post_init__(self) -> None:
        _check_fields(self)
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or not 1 <= self.repeats <= MAX_REPEATS:
            raise ConfigError("repeats", self.repeats, f"an integer from 1 to {MAX_REPEATS}")
        if self.effective_batch is not None:
            if isinstance(self.effective_batch, bool) or not isinstance(self.effective_batch, int) \
                    or self.effective_batch < 1:
                raise ConfigError("effective_batch", self.effective_batch, "a positive integer")
            if "accum_steps" in self.fields:
                raise ConfigError("accum_steps", self.values("accum_steps"),
                                  "left out with --effective-batch, which derives k = E / (N·b) for each b")
        count = self.cell_count * self.repeats
        if count > MAX_RUNS:
            raise ConfigError("repeats", self.repeats, f"a grid of at most {MAX_RUNS} runs ({count} asked)")

    @property
    def fields(self) -> tuple[str, ...]:
        """The crossed fields, in the grid's order."""
        return tuple(name for name, _ in self.grid)

    def values(self, field: str) -> tuple[Any, ...]:
        """The values crossed for one field."""
        return dict(self.grid)[field]

    @property
    def cell_count(self) -> int:
        """How many combinations the grid holds."""
        count = 1
        for _, values in self.grid:
            count *= len(values)
        return count

    @property
    def sweep_id(self) -> str:
        """Ten hex digits of a hash of the normalized spec: the same command gives the same id, so a
        rerun finds the runs it finished."""
        text = json.dumps(self.normalized(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]

    def normalized(self) -> dict[str, Any]:
        """What identifies the sweep: the grid, the common settings that differ from RunConfig's own
        defaults (a field added to RunConfig later leaves old ids alone), the repeats and E."""
        common = {k: v for k, v in self.common if k not in self.fields and v != getattr(_PLAIN, k)}
        return {"grid": [[k, list(v)] for k, v in self.grid], "common": common, "repeats": self.repeats,
                "same_seed": self.same_seed, "effective_batch": self.effective_batch}

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready data (spec.json)."""
        return {"sweep_id": self.sweep_id, "grid": [[k, list(v)] for k, v in self.grid],
                "common": dict(self.common), "repeats": self.repeats, "same_seed": self.same_seed,
                "effective_batch": self.effective_batch}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SweepSpec":
        """The spec spec.json holds; ConfigError when it is not one."""
        try:
            grid = tuple((str(k), tuple(v)) for k, v in data["grid"])
            return cls(grid, tuple(dict(data.get("common", {})).items()), int(data.get("repeats", 1)),
                       bool(data.get("same_seed", False)), data.get("effective_batch"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError("spec", str(exc)[:80], "a sweep spec (grid, common, repeats)") from None


def parse_item(field: str, kind: str, text: str) -> Any:
    """One value typed as a field's kind (bool, int, float, str); ConfigError naming the field."""
    if kind == "bool":
        if text.lower() not in _TRUE + _FALSE:
            raise ConfigError(field, text, "true or false (or on/off, yes/no, 1/0)")
        return text.lower() in _TRUE
    if kind in ("int", "float"):
        try:
            return int(text) if kind == "int" else float(text)
        except ValueError:
            raise ConfigError(field, text, "an integer" if kind == "int" else "a number") from None
    return text


def parse_values(field: str, kind: str, text: str) -> tuple[Any, ...]:
    """A comma list (a sweep flag's, a Sweeps-page box's) as typed values, each once, in the order given;
    ConfigError naming the field for an empty list or item, or an item not of its kind."""
    items = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise ConfigError(field, text, "one or more comma-separated values, none empty")
    return tuple(dict.fromkeys(parse_item(field, kind, item) for item in items))


def _check_fields(spec: SweepSpec) -> None:
    for name, values in spec.grid:
        if name not in FIELDS:
            raise ConfigError(name, values, "a RunConfig field")
        if not values:
            raise ConfigError(name, "", "one or more comma-separated values")
        if len(set(map(repr, values))) != len(values):
            raise ConfigError(name, ",".join(map(str, values)), "each value once")
    if len(set(spec.fields)) != len(spec.fields):
        raise ConfigError("grid", spec.fields, "each field once")
    for name, _ in spec.common:
        if name not in FIELDS:
            raise ConfigError(name, None, "a RunConfig field")


@dataclass(frozen=True)
class Cell:
    """One combination of the grid's values: its index, the values it sets and its config (first seed)."""

    index: int
    settings: tuple[tuple[str, Any], ...]
    config: RunConfig


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: its cell, its repeat, its config and the name it is stored under."""

    cell: int
    repeat: int
    config: RunConfig
    name: str


def cells(spec: SweepSpec) -> list[Cell]:
    """Every cell's config, in the grid's order (the last field varies fastest); ConfigError naming the
    field of the first value that cannot run (a b that does not divide E names micro_batch_size)."""
    common = dict(spec.common)
    found = []
    for index, combination in enumerate(itertools.product(*(values for _, values in spec.grid))):
        settings = tuple(zip(spec.fields, combination))
        values = {**common, **dict(settings)}
        if spec.effective_batch is not None:
            values["accum_steps"] = derived_accum_steps(values, spec.effective_batch)
        found.append(Cell(index, settings, RunConfig(**values)))
    return found


def derived_accum_steps(values: Mapping[str, Any], effective_batch: int) -> int:
    """k = E / (N·b) for a cell's values; ConfigError naming micro_batch_size when N·b does not divide E."""
    defaults = dataclasses.asdict(_PLAIN)
    b = values.get("micro_batch_size", defaults["micro_batch_size"])
    world = values.get("nproc", defaults["nproc"]) * values.get("nnodes", defaults["nnodes"])
    if not isinstance(b, int) or b < 1 or effective_batch % (world * b):
        processes = f" × N={world} processes" if world > 1 else ""
        raise ConfigError("micro_batch_size", b, f"a divisor of the effective batch {effective_batch}{processes} "
                                                 "(k = E / (N·b) must be whole)")
    return effective_batch // (world * b)


def run_name(sweep_id: str, cell: int, repeat: int) -> str:
    """The name a sweep's run is stored under: sweep-<id>-c<cell>-r<repeat>."""
    return f"{NAME_PREFIX}{sweep_id}-c{cell}-r{repeat}"


def parse_run_name(name: str) -> tuple[str, int, int] | None:
    """(sweep id, cell, repeat) of a sweep run's name, None for any other name."""
    found = _NAME_RE.match(name or "")
    return (found[1], int(found[2]), int(found[3])) if found else None


def sweep_tag(sweep_id: str) -> str:
    """The tag every run of the sweep carries on the Runs page."""
    return f"{NAME_PREFIX}{sweep_id}"


def sweep_runs(spec: SweepSpec) -> list[SweepRun]:
    """Every run: each cell × repeat, the seed seed + repeat (or seed each time with same_seed)."""
    sweep_id = spec.sweep_id
    runs = []
    for cell in cells(spec):
        for repeat in range(spec.repeats):
            seed = cell.config.seed + (0 if spec.same_seed else repeat)
            runs.append(SweepRun(cell.index, repeat, cell.config.replace(seed=seed),
                                 run_name(sweep_id, cell.index, repeat)))
    return runs


def same_run(a: RunConfig, b: RunConfig) -> bool:
    """Whether two configs train the same run, wherever they ran (the device a sweep assigns aside)."""
    return a.replace(device="auto") == b.replace(device="auto")

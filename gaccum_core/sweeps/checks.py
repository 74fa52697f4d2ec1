"""A sweep's grid checked whole before anything is written: its axes (fields a sweep may cross, each changing
some run, a seed that repeats cannot collide with), every cell's settings (RunConfig's rules, a b that does not
divide E), then what only the device, data and model can tell (preflight) once per cell."""

from __future__ import annotations

from gaccum_core.config import ConfigError, applies, by_field
from gaccum_core.sweeps.spec import AXES, Cell, SweepSpec, cells, sweep_runs
from gaccum_core.train.checks import preflight


def check_axes(spec: SweepSpec) -> list[Cell]:
    """The sweep's cells; ConfigError naming a crossed field a sweep may not cross, one that changes none of
    its cells (init_scale without fp16: each cell's runs trained again), or a seed crossed while the repeats
    take the seeds seed, seed+1, … (cell seed=0's second repeat would be cell seed=1's first)."""
    for name, values in spec.grid:
        if name not in AXES:
            raise ConfigError(name, _listed(values), "one value: a sweep crosses settings of training, not where a "
                                                     "run runs or reads, nor what it writes or records")
    if "seed" in spec.fields and spec.repeats > 1 and not spec.same_seed:
        raise ConfigError("seed", _listed(spec.values("seed")), f"one seed when each cell repeats {spec.repeats} "
                          "times with the seeds seed, seed+1, …: cross the seed with 1 repeat, or repeat with "
                          "the same seed")
    found = cells(spec)
    for name, values in spec.grid:
        if not any(applies(cell.config, name) for cell in found):
            raise ConfigError(name, _listed(values), f"one value where it changes no run of the sweep ({name}: "
                                                     f"{by_field('help')[name]})")
    return found


def _listed(values: tuple) -> str:
    return ",".join(map(str, values))


def check_sweep(spec: SweepSpec) -> list[Cell]:
    """The sweep's cells when every run can start here; ConfigError naming the field of the first that
    cannot (data and model errors explain themselves as ValueError)."""
    found = check_axes(spec)
    sweep_runs(spec)  # every repeat's seed too
    checked: set[str] = set()
    for cell in found:
        key = cell.config.replace(seed=0).to_json()  # the seed changes nothing preflight looks at
        if key not in checked:
            preflight(cell.config)
            checked.add(key)
    return found

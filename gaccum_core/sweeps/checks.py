"""A sweep's grid checked whole before anything is written: every cell's settings (RunConfig's rules, a b
that does not divide E), then what only the device, data and model can tell (preflight) once per cell."""

from __future__ import annotations

from gaccum_core.sweeps.spec import Cell, SweepSpec, cells, sweep_runs
from gaccum_core.train.checks import preflight


def check_sweep(spec: SweepSpec) -> list[Cell]:
    """The sweep's cells when every run can start here; ConfigError naming the field of the first that
    cannot (data and model errors explain themselves as ValueError)."""
    found = cells(spec)
    sweep_runs(spec)  # every repeat's seed too
    checked: set[str] = set()
    for cell in found:
        key = cell.config.replace(seed=0).to_json()  # the seed changes nothing preflight looks at
        if key not in checked:
            preflight(cell.config)
            checked.add(key)
    return found

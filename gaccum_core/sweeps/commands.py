"""A sweep as one `python -m gaccum_core run …` line per run, for a cluster's scheduler (a SLURM job array,
say) to run; the runs come back through a shared runs directory, found by their names. Pure."""

from __future__ import annotations

import dataclasses
import shlex

from gaccum_core.config import DEFAULT_RUN, RunConfig
from gaccum_core.sweeps.spec import SweepRun

PROGRAM = ("python", "-m", "gaccum_core", "run")


def config_flags(config: RunConfig, defaults: RunConfig = DEFAULT_RUN) -> list[str]:
    """The `run` flags that give this config: each field that differs from the command line's default."""
    flags = []
    for f in dataclasses.fields(RunConfig):
        value = getattr(config, f.name)
        if value == getattr(defaults, f.name):
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            if value:
                flags.append(flag)
            continue  # no field defaults to True: a False that differs cannot arise
        flags += [flag, repr(value) if isinstance(value, float) else str(value)]
    return flags


def run_command(run: SweepRun, runs_dir: str, program: tuple[str, ...] = PROGRAM) -> str:
    """One shell line that trains this run into runs_dir under its sweep name."""
    words = [*program, *config_flags(run.config), "--runs-dir", runs_dir, "--name", run.name]
    return shlex.join(words)

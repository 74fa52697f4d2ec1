"""Sweeps: a grid of settings × repeats run as ordinary runs, summarised per cell with 95 % intervals and
whether the cells that differ only in b and k coincide.

spec (the grid, its cells and runs, the id; pure) → labels, stats, figures, coincidence (pure) →
files (sweeps/<id>/spec.json, summary.csv) and members (which runs on disk are the sweep's) → summary →
checks (the grid before any run), devices (lanes per GPU; pure), commands (--print-commands; pure) →
job (the runs going, in the background). Imports the shared vocabulary, train and runs.
"""

from gaccum_core.exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "spec": ("SweepSpec", "Cell", "SweepRun", "cells", "sweep_runs", "run_name", "parse_run_name", "sweep_tag"),
    "labels": ("cell_label", "describe_sweep"),
    "stats": ("mean_ci", "t_975", "steady_median", "warmup_steps"),
    "figures": ("run_figures",),
    "coincidence": ("Verdict", "verdicts", "TOLERANCE"),
    "files": ("sweep_dir", "write_spec", "read_spec", "write_summary", "list_sweeps"),
    "members": ("Member", "find_members"),
    "summary": ("Summary", "summarize", "summary_of"),
    "devices": ("Lane", "lanes"),
    "commands": ("config_flags", "run_command"),
    "checks": ("check_sweep",),
    "job": ("SweepJob", "SweepProgress", "gpu_count"),
})

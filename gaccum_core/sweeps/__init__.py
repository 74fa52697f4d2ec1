"""Sweeps: a grid of settings × repeats run as ordinary runs, summarised per cell with 95 % intervals and
whether the cells that differ only in b and k coincide.

spec (the grid, its cells and runs, the id; pure) → labels, stats, figures, coincidence (pure) →
files (sweeps/<id>/spec.json, summary.csv) and members (which runs on disk are the sweep's) → summary →
checks (the grid before any run), devices (lanes per GPU; pure), commands (--print-commands; pure) →
job (the runs going, in the background). Imports the shared vocabulary, train and runs.
"""

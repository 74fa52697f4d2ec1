"""A run's colour, the same on every page and in every set of runs shown.

Chosen by the run's creation order among the runs on disk (run ids sort by creation time): runs made
one after another get different colours, ten in a row all differ, and a run keeps its colour whichever
other runs are shown beside it, on the Train page or the Runs page. A hash of the id would be stable too,
but with ten colours two of four runs shown would share one half of the time. Deleting a run shifts the
colours of the runs made after it; nothing else does.
"""

from __future__ import annotations

from collections.abc import Sequence

from plotly.colors import qualitative

PALETTE = tuple(qualitative.Plotly)


def run_colours(run_ids: Sequence[str]) -> dict[str, str]:
    """A colour per run from its creation order among `run_ids` (give every run on disk)."""
    return {run_id: PALETTE[i % len(PALETTE)] for i, run_id in enumerate(sorted(run_ids))}


def colour_at(index: int) -> str:
    """The colour of the index-th run shown, for runs given without one (the lab, tests, the command line)."""
    return PALETTE[index % len(PALETTE)]

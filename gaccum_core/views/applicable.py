"""Which charts do not apply to the runs shown, each with the one line a page shows instead of an empty
frame (the GradScaler's scale for runs without fp16, cache clearing when no run clears). Pure: no I/O.

A chart applies as soon as one run shown has a value for it; before any run has a row nothing is
decided (the charts show that they wait for the first step)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from gaccum_core.views.collectives_chart import NOT_APPLICABLE as NO_COLLECTIVES, has_collectives
from gaccum_core.views.series import RunSeries, is_language, with_rows

NO_FP16 = "none of these runs trains in fp16, the only precision with a GradScaler"


def _any_finite(runs: list[RunSeries], column: str) -> bool:
    return any(column in run.metrics and np.isfinite(run.metrics[column].to_numpy(dtype=float)).any()
               for run in runs)


def _any_positive(runs: list[RunSeries], column: str) -> bool:
    return any(column in run.metrics and (run.metrics[column].to_numpy(dtype=float) > 0).any() for run in runs)


# chart name -> why it does not apply to these runs (runs with rows), or None when it does
RULES: dict[str, Callable[[list[RunSeries]], str | None]] = {
    "scale": lambda runs: None if _any_finite(runs, "scale") else f"GradScaler loss scale: not applicable, {NO_FP16}.",
    "skipped": lambda runs: None if _any_finite(runs, "scale") or _any_positive(runs, "skipped_total") else (
        f"Skipped optimizer steps: not applicable, only a GradScaler skips steps and {NO_FP16}."),
    "cache": lambda runs: None if _any_positive(runs, "cache_clear_s") else (
        "Cache-clearing time: not applicable, no run here clears the cache (clear_cache is off)."),
    "collectives": lambda runs: None if any(has_collectives(run) for run in runs) else NO_COLLECTIVES,
    "perplexity": lambda runs: None if any(is_language(run) for run in runs) else (
        "Validation perplexity: not applicable, no run here is a language model (gpt on text)."),
}


def not_applicable(runs: list[RunSeries], charts: tuple[str, ...] | list[str] | None = None) -> dict[str, str]:
    """The charts (of `charts`, default every chart with a rule) that do not apply to these runs, each with
    one line saying why; empty while no run has a row yet."""
    drawn = [run for _, run in with_rows(runs)]
    if not drawn:
        return {}
    names = RULES if charts is None else [name for name in charts if name in RULES]
    notes = {name: RULES[name](drawn) for name in names}
    return {name: note for name, note in notes.items() if note is not None}

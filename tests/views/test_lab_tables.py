"""The pitfall gallery's results as the page shows and exports them: one row per pitfall with its title,
and every step of every run in one CSV labelled by pitfall key (the nine, and the FSDP traps)."""

import io

import pandas as pd

from gaccum_core.lab.pitfalls.catalog import FSDP_PITFALLS, PITFALLS
from gaccum_core.lab.pitfalls.fsdp_job import FsdpGallery
from gaccum_core.lab.pitfalls.result import PitfallResult
from gaccum_core.views.lab import fsdp_csv, pitfall_csv, pitfall_table, pitfall_table_formats


def result(key: str, steps: int = 3, scale: float = 1.0) -> PitfallResult:
    """A pitfall run whose distance to one big batch grows by `scale` a step; the correct loop's stays tiny."""
    frame = pd.DataFrame({"step": range(1, steps + 1), "distance_pitfall": [scale * s for s in range(1, steps + 1)],
                          "distance_correct": [1e-9] * steps, "grad_norm_ratio": [0.5] * steps})
    return PitfallResult(key, frame, scale * steps, 1e-9, 0.5)


def test_the_table_has_a_row_per_pitfall_under_its_title():
    first, second = list(PITFALLS)[:2]
    table = pitfall_table([result(first), result(second, scale=2.0)])
    assert list(table.columns) == ["pitfall", "distance (pitfall)", "distance (correct)", "grad-norm ratio"]
    assert list(table["pitfall"]) == [PITFALLS[first].title, PITFALLS[second].title]
    assert list(table["distance (pitfall)"]) == [3.0, 6.0] and list(table["grad-norm ratio"]) == [0.5, 0.5]
    assert set(pitfall_table_formats()) == {"distance (pitfall)", "distance (correct)"} <= set(table.columns)


def test_the_csv_holds_every_step_of_every_run_by_pitfall_key():
    keys = list(PITFALLS)[:3]
    frame = pd.read_csv(io.StringIO(pitfall_csv([result(key, steps=4) for key in keys])))
    assert list(frame["pitfall"].unique()) == keys and len(frame) == 12
    assert list(frame.columns) == ["step", "distance_pitfall", "distance_correct", "grad_norm_ratio", "pitfall"]


def test_the_fsdp_csv_labels_each_trap_in_the_gallerys_order():
    gallery = FsdpGallery({key: result(key, steps=2) for key in FSDP_PITFALLS}, 0.5, "", True, False,
                          {key: 1e-9 for key in FSDP_PITFALLS})
    frame = pd.read_csv(io.StringIO(fsdp_csv(gallery)))
    assert list(frame["pitfall"].unique()) == list(FSDP_PITFALLS) and len(frame) == 2 * len(FSDP_PITFALLS)
    assert pitfall_table(gallery.results.values())["pitfall"].tolist() == [p.title for p in FSDP_PITFALLS.values()]

"""Plotly figures for the accumulation lab: gradient differences, side-by-side training, pitfalls; the
pitfall gallery's results tables, measured figures and CSV exports."""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from gaccum_core.lab.pitfalls.catalog import pitfall
from gaccum_core.lab.pitfalls.checkpointing import CheckpointingCase
from gaccum_core.lab.pitfalls.fsdp_job import FsdpGallery
from gaccum_core.lab.pitfalls.result import PitfallResult

_LAYOUT = dict(template="plotly_white", height=320, margin=dict(l=50, r=10, t=40, b=40))
# Distances of exactly 0 cannot sit on a log axis: drawn at this floor instead.
_FLOOR = 1e-12
_BARS_PX = 220  # the gradient chart's bars, however much room their names take below
_TICK_CHAR_PX = 7  # the widest a character of a 12 px tick label is drawn


def _figure(name: str, title: str, x_title: str, y_title: str, log_y: bool = False) -> go.Figure:
    figure = go.Figure()
    figure.update_layout(title=title, xaxis_title=x_title, yaxis_title=y_title, uirevision=name,
                         yaxis_type="log" if log_y else "linear", **_LAYOUT)
    return figure


def _floored(values: pd.Series) -> np.ndarray:
    return np.maximum(values.to_numpy(dtype=float), _FLOOR)


def _room_below(names: pd.Series) -> int:
    """Pixels under the bars for the tensor names tilted 45° and the axis title under them."""
    longest = int(names.astype(str).str.len().max()) if len(names) else 0
    return 50 + math.ceil(longest * _TICK_CHAR_PX * math.sin(math.radians(45)))


def gradient_figure(table: pd.DataFrame) -> go.Figure:
    """Relative L2 error of the accumulated gradient per parameter tensor, on a linear axis from 0: a log
    axis began at the smallest bar (75n) and made float rounding look like large differences. The chart grows
    by the room its names take, so the bars and the y axis's title beside them keep their height: with a
    model's long names (blocks.0.attention.qkv.weight) that room came out of the bars and clipped the title."""
    figure = _figure("gradients", "accumulated vs one big batch: ‖accumulated − big‖ / ‖big‖ per tensor",
                     "parameter tensor", "relative L2 error")
    below = _room_below(table["name"])
    figure.update_layout(height=_LAYOUT["margin"]["t"] + _BARS_PX + below, margin_b=below)
    figure.update_xaxes(tickangle=-45, automargin=True)
    figure.update_yaxes(rangemode="tozero", exponentformat="e", automargin=True)  # 1e-7, not 100n
    figure.add_bar(x=table["name"], y=table["rel_l2"].to_numpy(dtype=float), name="relative L2 error",
                   customdata=np.stack([table["max_abs_diff"], table["cosine"]], axis=1),
                   hovertemplate="%{x}<br>rel L2 %{y:.2e}<br>max |diff| %{customdata[0]:.2e}"
                                 "<br>cosine %{customdata[1]:.8f}<extra></extra>")
    return figure


def side_by_side_figures(frame: pd.DataFrame) -> tuple[go.Figure, go.Figure]:
    """Both loss curves, and the L2 distance between the two runs' weights, over optimizer steps."""
    losses = _figure("side_losses", "training loss", "optimizer step", "loss")
    losses.add_scatter(x=frame["step"], y=frame["loss_big"], name="one big batch", mode="lines")
    losses.add_scatter(x=frame["step"], y=frame["loss_accum"], name="accumulated", mode="lines",
                       line=dict(dash="dash"))
    distance = _figure("side_distance", "‖weights(accumulated) − weights(big batch)‖", "optimizer step",
                       "L2 distance", log_y=True)
    distance.add_scatter(x=frame["step"], y=_floored(frame["weight_distance"]), name="distance", mode="lines+markers")
    return losses, distance


def pitfall_figure(frame: pd.DataFrame, title: str) -> go.Figure:
    """Weight distance to the one-big-batch reference: the pitfall against the correct loop."""
    figure = _figure(f"pitfall_{title}", title, "optimizer step", "L2 distance to one big batch", log_y=True)
    figure.add_scatter(x=frame["step"], y=_floored(frame["distance_pitfall"]), name="pitfall", mode="lines",
                       line=dict(color="#d62728"))
    figure.add_scatter(x=frame["step"], y=_floored(frame["distance_correct"]), name="correct", mode="lines",
                       line=dict(color="#2ca02c"))
    return figure


def fsdp_measures(gallery: FsdpGallery) -> dict[str, list[tuple[str, str]]]:
    """What each FSDP trap's job measured beside its chart, as (label, value) lines, by trap key."""
    ratio = ("Gradient norm at step 1, over the big batch's", f"{gallery.first_step_grad_ratio:.5f}")
    fixes = gallery.fix_distances
    return {
        "fsdp_averaged_gradients": [ratio],
        "fsdp_divide_factor_on_root": [
            ratio,
            ("set_gradient_divide_factor(1.0) on every unit: the backward on gloo raises",
             gallery.premul_sum_error or "nothing"),
            ("With set_force_sum_reduction_for_comms(True) too: largest distance to one big batch",
             f"{fixes['fsdp_divide_factor_on_root']:.1e}"),
        ],
        "fsdp_reshard_off_at_step": [
            ("model.parameters() at the step: .grad", "None on every one" if gallery.grad_none_at_step else "set"),
            ("After unit.reshard() for every unit: .grad", "None on some" if gallery.grad_none_after_reshard
             else "set on every one"),
            ("With that reshard before each step: largest distance to one big batch",
             f"{fixes['fsdp_reshard_off_at_step']:.1e}"),
        ],
    }


def packing_measures(packed: PitfallResult) -> list[tuple[str, str]]:
    """What the mean of means on sequences does once documents are packed into full sequences, as (label, value)
    lines: every micro-batch then holds as many target tokens, and the textbook weighting is the exact one."""
    return [("With packing on (documents joined into full sequences): weight distance after the last step",
             f"{packed.final_distance_pitfall:.2e} (correct loop: {packed.final_distance_correct:.1e})"),
            ("With packing on: gradient-norm ratio (pitfall / reference)", f"{packed.grad_norm_ratio:.4f}")]


def pitfall_table(results: Iterable[PitfallResult]) -> pd.DataFrame:
    """One row per pitfall run: its title, its and the correct loop's final weight distance to one big
    batch, and the median gradient-norm ratio (pitfall / reference)."""
    return pd.DataFrame([{"pitfall": pitfall(r.key).title, "distance (pitfall)": r.final_distance_pitfall,
                          "distance (correct)": r.final_distance_correct, "grad-norm ratio": r.grad_norm_ratio}
                         for r in results])


def pitfall_table_formats() -> dict[str, str]:
    """printf format of pitfall_table's distances: tiny and huge side by side, so in e-notation."""
    return {"distance (pitfall)": "%.2e", "distance (correct)": "%.2e"}


def pitfall_csv(results: Iterable[PitfallResult]) -> str:
    """Every optimizer step of each run, its pitfall's key in a `pitfall` column, as CSV text."""
    return pd.concat([r.frame.assign(pitfall=r.key) for r in results]).to_csv(index=False)


def fsdp_csv(gallery: FsdpGallery) -> str:
    """The FSDP traps' steps as CSV text, as pitfall_csv writes the nine."""
    return pitfall_csv(gallery.results.values())


# The checkpointing cases' per-parameter table as the page shows it: CheckpointingCase.frame's columns, renamed.
_CHECKPOINTING_COLUMNS = {"parameter": "parameter", "in_block": "checkpointed", "shape": "shape",
                          "reference_norm": "‖grad‖ without", "trap_norm": "‖grad‖ trap",
                          "right_norm": "‖grad‖ engine", "trap_max_abs_diff": "max |Δ| trap",
                          "right_max_abs_diff": "max |Δ| engine"}


def checkpointing_metrics(case: CheckpointingCase) -> list[tuple[str, str, str]]:
    """A checkpointing case's two figures as (label, value, beside): the trap's, then the engine's checkpointing's,
    each against the gradient without checkpointing."""
    without = f"without checkpointing: {case.reference_block_norm:.3g}"
    if case.trap_grad_none:
        trap = ("Trap: gradient norm of the checkpointed block", "0 (.grad None)", without)
    else:
        trap = ("Trap: max |Δ grad| against no checkpointing", f"{case.trap_max_diff:.2e}",
                f"block gradient norm {case.trap_block_norm:.3g}, {without}")
    return [trap, ("The engine's checkpointing: max |Δ grad| against none", f"{case.right_max_diff:.1e}",
                   "over every parameter")]


def checkpointing_notes(case: CheckpointingCase) -> list[tuple[str, str]]:
    """What else the case measured, as (label, value) lines: the trap outside the block, and torch's warning."""
    notes = [("Trap: max |Δ grad| outside the checkpointed block", f"{case.trap_max_diff_outside:.1e}")]
    return notes + ([("torch warned", case.warning)] if case.warning else [])


def checkpointing_table(case: CheckpointingCase) -> pd.DataFrame:
    """One row per parameter tensor: in the checkpointed block or not, its gradient's norm each way, and the
    largest differences from the gradient without checkpointing."""
    return case.frame[list(_CHECKPOINTING_COLUMNS)].rename(columns=_CHECKPOINTING_COLUMNS)


def checkpointing_table_formats() -> dict[str, str]:
    """printf formats of checkpointing_table's numbers: norms fixed, differences in e-notation."""
    norms = {name: "%.4f" for name in ("‖grad‖ without", "‖grad‖ trap", "‖grad‖ engine")}
    return {**norms, "max |Δ| trap": "%.2e", "max |Δ| engine": "%.2e"}


def checkpointing_csv(cases: Iterable[CheckpointingCase]) -> str:
    """Every parameter tensor of each checkpointing case, its key in a `pitfall` column, as CSV text."""
    return pd.concat([case.frame.assign(pitfall=case.key) for case in cases]).to_csv(index=False)

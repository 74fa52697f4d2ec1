"""Dashboard figures: decimation keeps what a user looks for, and every chart draws any input."""

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from gaccum_core.views.charts import (CHARTS, NO_EVALS, NO_SCALER, PALETTE, WAITING, accuracy_figure, build_figures,
                                      loss_figure, memory_figure, scale_figure)
from gaccum_core.views.coinciding import coinciding
from gaccum_core.views.series import MAX_POINTS, RunSeries, downsample
from gaccum_core.config import RunConfig
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import smooth_ema
from chart_runs import annotations, ddp_run, empty_run, evals, metrics, run


# --- downsample -----------------------------------------------------------------------------

def test_downsample_keeps_first_last_and_a_single_spike_of_a_long_series():
    frame = metrics(50_000)
    frame.loc[31_337, "loss"] = 50.0
    frame.loc[12_345, "loss"] = -50.0
    small = downsample(frame, "step", "loss")
    assert len(small) <= MAX_POINTS
    assert len(small) > MAX_POINTS * 0.9  # uses its budget, not a handful of points
    assert small["step"].iloc[0] == 1 and small["step"].iloc[-1] == 50_000
    assert 50.0 in small["loss"].values and -50.0 in small["loss"].values
    assert small["step"].is_monotonic_increasing
    assert small["loss"].max() == frame["loss"].max() and small["loss"].min() == frame["loss"].min()


def test_downsample_respects_a_small_budget():
    small = downsample(metrics(10_001), "wall_time_s", "loss", max_points=100)
    assert len(small) <= 100 and small["step"].iloc[-1] == 10_001


def test_downsample_returns_short_frames_unchanged():
    frame = metrics(MAX_POINTS)
    assert downsample(frame, "step", "loss") is frame


def test_downsample_drops_non_finite_values_without_crashing():
    frame = metrics(50_000)
    frame.loc[[0, 100, 40_000], "loss"] = [np.nan, np.inf, -np.inf]
    small = downsample(frame, "step", "loss")
    assert np.isfinite(small["loss"]).all() and len(small) <= MAX_POINTS
    assert small["step"].iloc[0] == 2  # the first finite point
    short = downsample(metrics(10).assign(loss=np.nan), "step", "loss")
    assert short.empty


# --- figures --------------------------------------------------------------------------------

@pytest.mark.parametrize("x", ["step", "samples_seen", "wall_time_s"])
def test_every_chart_draws_overlaid_runs_with_a_stable_uirevision(x):
    runs = [run(50, "a", evals_at=[25, 50], fp16=True), ddp_run(80, "b", evals_at=[40, 80], fp16=True)]
    figures = build_figures(runs, x, smoothing=0.6)
    assert list(figures) == list(CHARTS)
    # loss and throughput (smoothed): a raw and a smoothed line per run;
    # scale: a line and the skipped marks per run, and the marks' legend key; memory: training memory,
    # activations, process memory and (a 2-process run shown: per rank) gradients kept per run, and four legend
    # keys for the line styles; collectives: the 2-process run's all-reduces, its legend entry and the kind's key
    expected = {"loss": 4, "scale": 5, "skipped": 2, "memory": 12, "collectives": 3, "throughput": 4,
                "accuracy": 2, "grad_norm": 2, "lr": 2, "cache": 2}
    for name, figure in figures.items():
        assert isinstance(figure, go.Figure)
        assert len(figure.data) == expected[name], name
        assert figure.layout.uirevision == f"{name}:{x}" + (":log" if name == "scale" else "")
        assert figure.layout.hovermode == "x unified"  # hovering lists every run at that x
        assert figure.layout.legend.orientation == "h"  # under the plot, not beside it
        assert figure.layout.xaxis.title.text and figure.layout.yaxis.title.text and figure.layout.title.text
        assert figure.layout.showlegend and not annotations(figure)
    assert figures["scale"].layout.yaxis.type == "log"
    assert figures["loss"].layout.yaxis.type == "linear"
    white = pio.templates["plotly_white"].layout
    look = figures["loss"].layout.template.layout
    assert (look.plot_bgcolor, look.xaxis.gridcolor, look.colorway) == (white.plot_bgcolor, white.xaxis.gridcolor,
                                                                        white.colorway)


def test_the_view_survives_more_points_runs_and_smoothing_but_not_a_new_x_axis():
    """uirevision is what keeps a user's zoom and hidden legend entries across a live redraw; trace
    uids keep a hidden entry with its run when another run's traces come before it."""
    kind = dict(evals_at=[5, 10], fp16=True)
    first = build_figures([run(10, "a", **kind)], "step", 0.6)
    later = build_figures([run(10, "b", **kind), run(300, "a", evals_at=[5, 10, 300], fp16=True)], "step", 0.9)
    other_x = build_figures([run(10, "a", **kind)], "samples_seen", 0.6)
    for name in CHARTS:
        assert first[name].layout.uirevision == later[name].layout.uirevision, name
        assert other_x[name].layout.uirevision != first[name].layout.uirevision, name
        uids = [trace.uid for trace in later[name].data]
        assert len(set(uids)) == len(uids) and all(uids), name
        assert {trace.uid for trace in first[name].data} <= set(uids), name
    assert len({figure.layout.uirevision for figure in first.values()}) == len(CHARTS)


def test_tidy_axes_accuracy_from_0_to_1_whole_steps_and_a_log_switch_per_chart():
    figures = build_figures([run(50, "a", evals_at=[25, 50], fp16=True)], "step", 0.6)
    assert tuple(figures["accuracy"].layout.yaxis.range) == (0.0, 1.0)
    assert figures["loss"].layout.xaxis.tickformat == ",d"
    assert build_figures([run(5)], "wall_time_s", 0.6)["loss"].layout.xaxis.tickformat is None
    logged = build_figures([run(50, "a", fp16=True)], "step", 0.6, log_y=frozenset({"loss", "grad_norm"}))
    assert {name for name, f in logged.items() if f.layout.yaxis.type == "log"} == {"loss", "grad_norm"}
    assert logged["loss"].layout.uirevision != figures["loss"].layout.uirevision  # new units: the view resets


def test_the_new_charts_draw_gradient_norm_learning_rate_and_cache_time():
    a = run(30, "a")
    figures = build_figures([a], "step", 0.6)
    assert list(figures["grad_norm"].data[0].y) == pytest.approx(a.metrics["grad_norm"].tolist())
    assert list(figures["lr"].data[0].y) == pytest.approx(a.metrics["lr"].tolist())
    assert list(figures["cache"].data[0].y) == pytest.approx(a.metrics["cache_clear_s"].tolist())


def test_coinciding_runs_are_found_and_the_later_one_is_dashed():
    a = run(40, "a")
    same = RunSeries("b", "b", a.metrics.assign(loss=a.metrics["loss"] * (1 + 1e-7)), a.evals)
    other = run(40, "c", seed=1)
    (group,) = coinciding([a, other, same])
    assert group.run_ids == ("a", "b") and group.steps == 40 and 0 < group.max_diff < 1e-6
    loss = loss_figure([a, other, same], "step", 0.6)
    dashes = {t.uid: t.line.dash for t in loss.data if t.showlegend is not False}
    assert dashes == {"a--loss": "solid", "c--loss": "solid", "b--loss": "dash"}
    assert coinciding([a, run(41, "d")]) == []  # other losses over the 40 steps they share


def test_a_run_keeps_its_colour_across_charts():
    figures = build_figures([run(10, "a"), run(10, "b")], "step", 0.5)
    assert figures["throughput"].data[3].line.color == PALETTE[1]
    assert figures["loss"].data[3].line.color == PALETTE[1]
    assert {t.line.color for t in figures["memory"].data if t.name.startswith("b ")} == {PALETTE[1]}


@pytest.mark.parametrize("runs", [[], [empty_run()], [empty_run(), empty_run()]])
def test_no_steps_yet_gives_the_waiting_annotation(runs):
    for name, figure in build_figures(runs, "samples_seen", 0.9).items():
        assert annotations(figure) == [WAITING], name
        assert len(figure.data) == 0


def test_scale_chart_marks_skipped_steps_and_leaves_out_runs_without_a_scaler():
    figure = scale_figure([run(100, "amp-off"), run(100, "fp16", fp16=True)], "step")
    line, marks, key = figure.data
    assert line.name == "fp16" and line.line.color == PALETTE[1]
    assert key.name == "skipped step" and key.marker.symbol == "x" and marks.showlegend is False
    assert list(marks.x) == [1, 51] and marks.mode == "markers" and marks.marker.symbol == "x"
    assert list(marks.y) == [65536.0, 32768.0]  # the scale those steps used


def test_scale_chart_without_any_scaler_says_so():
    figure = scale_figure([run(100, "a"), run(100, "b")], "step")
    assert len(figure.data) == 0 and annotations(figure) == [NO_SCALER]


def test_memory_chart_shows_training_memory_first_and_process_memory_apart():
    cpu = memory_figure([run(10, "cpu")], "step")
    assert [t.name for t in cpu.data] == ["cpu", "cpu activations", "cpu process memory (RSS)", "training memory",
                                          "activations", "process memory (RSS), right axis"]
    main, activations, rss = cpu.data[:3]
    assert [t.showlegend for t in cpu.data[:3]] == [True, False, False]  # one entry per run, one per style
    assert list(main.y) == [24.0] * 10 and main.line.width > activations.line.width
    assert list(main.customdata[0]) == [1.0, 1.0, 2.0, 20.0] and "optimizer state" in main.hovertemplate
    assert rss.yaxis == "y2" and rss.opacity < 0.5 and cpu.layout.yaxis2.title.text == "process RSS (MB)"
    assert cpu.layout.title.text == "training memory"
    assert cpu.layout.title.subtitle.text == "weights + gradients + optimizer state + activations saved for backward"
    assert cpu.layout.yaxis.title.text == "training memory (MB)" and cpu.layout.yaxis.rangemode == "tozero"
    cuda = memory_figure([run(10, "gpu", cuda=True)], "step")
    assert [t.name for t in cuda.data][:5] == ["gpu", "gpu activations", "gpu allocated (CUDA)",
                                               "gpu reserved (CUDA)", "gpu peak (CUDA)"]
    assert [t.name for t in cuda.data][5:] == ["training memory", "activations", "allocated (CUDA)",
                                               "reserved (CUDA)", "peak (CUDA)"]
    assert all(t.yaxis is None for t in cuda.data) and "yaxis2" not in cuda.to_dict()["layout"]  # no RSS on CUDA


def test_a_run_written_before_training_memory_was_recorded_still_draws():
    old = RunSeries("old", "old", metrics(5).drop(columns=["weights_mb", "gradients_mb", "optimizer_mb",
                                                           "train_mem_mb"]), evals([]))
    figure = memory_figure([old, run(5, "new")], "step")
    assert [t.name for t in figure.data if t.legendgroup in ("old", "new")] == [
        "old activations", "old process memory (RSS)", "new", "new activations", "new process memory (RSS)"]
    assert [t.name for t in figure.data if t.showlegend] == [
        "old activations", "new", "training memory", "activations", "process memory (RSS), right axis"]


def test_accuracy_against_samples_seen_uses_the_metrics_row_of_each_eval_step():
    figure = accuracy_figure([run(100, "a", evals_at=[10, 100])], "samples_seen")
    (trace,) = figure.data
    assert list(trace.x) == [320, 3200] and list(trace.y) == [0.5, 0.9]
    assert "markers" in trace.mode and "lines" in trace.mode
    by_wall_time = accuracy_figure([run(100, "a", evals_at=[10, 100])], "wall_time_s")
    assert list(by_wall_time.data[0].x) == pytest.approx([0.6, 1.5])


def test_accuracy_before_the_first_evaluation_says_so():
    figure = accuracy_figure([run(10, "a")], "samples_seen")
    assert len(figure.data) == 0 and annotations(figure) == [NO_EVALS]


def test_zero_smoothing_draws_the_raw_loss():
    raw, smoothed = loss_figure([run(300)], "step", smoothing=0.0).data
    np.testing.assert_array_equal(raw.y, smoothed.y)
    assert raw.opacity < 1 and raw.line.width < smoothed.line.width


def test_smoothing_runs_on_the_full_series_before_downsampling():
    frame = metrics(20_000)
    figure = loss_figure([RunSeries("a", "a", frame, evals([]))], "step", smoothing=0.99)
    smoothed = figure.data[1]
    assert len(smoothed.x) <= MAX_POINTS
    full = dict(zip(frame["step"], smooth_ema(frame["loss"].tolist(), 0.99)))
    assert list(smoothed.y) == pytest.approx([full[s] for s in smoothed.x])
    # Smoothing the decimated points instead would give visibly different values.
    decimated = downsample(frame, "step", "loss")
    wrong = smooth_ema(decimated["loss"].tolist(), 0.99)
    assert max(abs(a - b) for a, b in zip(wrong, [full[s] for s in decimated["step"]])) > 0.05


def test_bad_options_name_the_field():
    with pytest.raises(ValueError, match="smoothing=1"):
        loss_figure([run(5)], "step", smoothing=1)
    with pytest.raises(ValueError, match="x='epoch'"):
        scale_figure([run(5)], "epoch")


def test_a_real_engine_run_draws_without_errors():
    rows = []

    class ListSink:
        def log_step(self, row):
            rows.append(row)

        def log_eval(self, row):
            pass

    Engine(RunConfig(model="mlp", device="cpu", max_steps=5)).run(ListSink())
    real = RunSeries("real", "b=32 k=4", pd.DataFrame(rows), evals([5]))
    figures = build_figures([real], "samples_seen", 0.6)
    assert len(figures["loss"].data) == 2 and len(figures["accuracy"].data) == 1
    assert annotations(figures["scale"]) == [NO_SCALER]
    assert all(math.isfinite(v) for v in figures["loss"].data[1].y)
    for figure in figures.values():
        figure.to_json()

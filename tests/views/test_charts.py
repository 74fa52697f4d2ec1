"""Dashboard figures: decimation keeps what a user looks for, and every chart draws any input."""

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from gaccum_core.views.axes import LEFT_OUT, tokens_axis_note
from gaccum_core.views.charts import (ALL_CHARTS, CHARTS, LOG_BY_DEFAULT, NO_EVALS, NO_LANGUAGE, NO_SCALER, PALETTE,
                                      WAITING, accuracy_figure, build_figures, loss_figure, memory_figure,
                                      perplexity_figure, scale_figure, throughput_figure)
from gaccum_core.views.coinciding import coinciding
from gaccum_core.views.applicable import not_applicable
from gaccum_core.views.collectives_chart import NO_COLLECTIVES, collectives_figure
from gaccum_core.views.series import MAX_POINTS, RunSeries, downsample, is_language
from gaccum_core.config import RunConfig
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import EVAL_COLUMNS, STEP_COLUMNS, smooth_ema


def metrics(n, fp16=False, cuda=False, seed=0):
    """n hand-made optimizer-step rows with every STEP_COLUMN."""
    rng = np.random.default_rng(seed)
    step = np.arange(1, n + 1)
    skipped = np.zeros(n, dtype=int)
    if fp16:
        skipped[[0, n // 2]] = 1
    frame = pd.DataFrame({
        "step": step, "epoch": step // 100, "micro_batches": 4, "samples": 32, "samples_seen": step * 32,
        "loss": 2 * np.exp(-step / max(n, 1)) + rng.normal(0, 0.1, n), "lr": 1e-3,
        "grad_norm": rng.uniform(0.5, 2, n),
        "scale": 65536.0 / 2.0 ** (np.cumsum(skipped) - skipped) if fp16 else np.nan,
        "skipped": skipped, "skipped_total": np.cumsum(skipped),
        "mem_allocated_mb": 100.0, "mem_reserved_mb": 200.0 if cuda else np.nan, "mem_peak_mb": 150.0,
        "activation_mb": 20.0, "cache_clear_s": 0.0, "step_time_s": 0.01, "samples_per_s": 3200.0,
        "wall_time_s": step * 0.01, "world_size": 1, "allreduce_calls": 0, "allreduce_bytes": 0,
        "tokens": np.nan, "tokens_seen": np.nan, "tokens_per_s": np.nan,
        "weights_mb": 1.0, "gradients_mb": 1.0, "optimizer_mb": 2.0, "train_mem_mb": 24.0,
        "reduce_scatter_calls": 0, "reduce_scatter_bytes": 0, "all_gather_calls": 0, "all_gather_bytes": 0,
        "grad_kept_mb": 1.0,
    })
    return frame[list(STEP_COLUMNS)]


def evals(steps):
    return pd.DataFrame({"epoch": 0, "step": steps, "test_loss": 1.0,
                         "test_accuracy": np.linspace(0.5, 0.9, len(steps)),
                         "wall_time_s": np.asarray(steps) * 0.01 + 0.5, "perplexity": np.nan, "eval_samples": 64,
                         "eval_tokens": np.nan})[list(EVAL_COLUMNS)]


def run(n, label="run", evals_at=(), **kind):
    return RunSeries(run_id=label, label=label, metrics=metrics(n, **kind), evals=evals(list(evals_at)))


def ddp_run(n, label="ddp", evals_at=(), **kind):
    """A 2-process DDP run: one all-reduce of a 4 MB gradient per step, figures per rank."""
    frame = metrics(n, **kind).assign(world_size=2, allreduce_calls=1, allreduce_bytes=4 * 2**20)
    return RunSeries(run_id=label, label=label, metrics=frame, evals=evals(list(evals_at)))


def empty_run():
    return RunSeries("empty", "empty", pd.DataFrame(columns=STEP_COLUMNS), pd.DataFrame(columns=EVAL_COLUMNS))


def annotations(figure):
    return [a.text for a in figure.layout.annotations]


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


# --- language runs ----------------------------------------------------------------------------

def lm_run(n, label="lm", evals_at=(), seed=0, fp16=False):
    """n optimizer steps of a language run: tokens per step vary (short last chunks), evals carry perplexity."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(200, 257, n)
    frame = metrics(n, seed=seed, fp16=fp16).assign(tokens=tokens, tokens_seen=np.cumsum(tokens),
                                         tokens_per_s=rng.uniform(5000, 6000, n))
    losses = np.linspace(5.0, 2.0, len(evals_at))
    ev = evals(list(evals_at)).assign(test_loss=losses, perplexity=np.exp(losses), eval_tokens=6400)
    return RunSeries(run_id=label, label=label, metrics=frame, evals=ev)


def test_a_language_run_gets_tokens_per_second_token_accuracy_and_perplexity():
    lm = lm_run(30, evals_at=[10, 20, 30])
    figures = build_figures([lm], "step", 0.6)
    assert list(figures) == ["loss", "accuracy", "perplexity", *list(CHARTS)[2:]]  # perplexity beside accuracy
    throughput = figures["throughput"]
    assert throughput.layout.yaxis.title.text == "tokens/s"
    assert list(throughput.data[0].y) == pytest.approx(lm.metrics["tokens_per_s"].tolist())
    accuracy = figures["accuracy"]
    assert accuracy.layout.title.text == "validation token accuracy" and tuple(accuracy.layout.yaxis.range) == (0, 1)
    perplexity = figures["perplexity"]
    assert "perplexity" in LOG_BY_DEFAULT and perplexity.layout.yaxis.type == "log"
    assert list(perplexity.data[0].x) == [10, 20, 30]
    assert list(perplexity.data[0].y) == pytest.approx(np.exp(np.linspace(5.0, 2.0, 3)))
    assert perplexity.layout.uirevision == "perplexity:step:log" and not annotations(perplexity)
    assert tuple(figures) == ALL_CHARTS  # the order a per-chart option (the log y pills) offers them in


def test_image_runs_keep_their_charts_and_get_no_perplexity():
    figures = build_figures([run(30, "img", evals_at=[30])], "step", 0.6)
    assert list(figures) == list(CHARTS)
    assert figures["throughput"].layout.yaxis.title.text == "samples/s"
    assert figures["accuracy"].layout.title.text == "test accuracy"
    assert not is_language(run(3)) and is_language(lm_run(3))
    old = RunSeries("old", "old", metrics(5).drop(columns=["tokens", "tokens_seen", "tokens_per_s"]), evals([5]))
    assert not is_language(old) and list(build_figures([old], "step", 0.6)) == list(CHARTS)  # rows from before tokens
    assert annotations(perplexity_figure([run(5)], "step")) == [NO_LANGUAGE]


def test_the_evaluation_hover_says_how_much_each_evaluation_covered():
    image, lm = run(30, "img", evals_at=[10, 30]), lm_run(30, "lm", evals_at=[10, 30])
    figures = build_figures([image, lm], "step", 0.6)
    accuracy = {trace.legendgroup: trace for trace in figures["accuracy"].data}
    assert accuracy["img"].hovertemplate == "%{y:.3f} over %{customdata:,.0f} test images"
    assert list(accuracy["img"].customdata) == [64, 64]
    assert accuracy["lm"].hovertemplate.endswith("over %{customdata:,.0f} target tokens")
    assert figures["perplexity"].data[0].hovertemplate == "%{y:.4g} over %{customdata:,.0f} target tokens"
    old = RunSeries("old", "old", metrics(30), evals([10]).drop(columns=["eval_samples", "eval_tokens"]))
    trace = accuracy_figure([old], "samples_seen").data[0]  # written before eval.csv counted it: plotly's own hover
    assert trace.hovertemplate is None and trace.customdata is None


def test_tokens_seen_is_an_x_axis_of_every_chart_of_a_language_run():
    lm = lm_run(40, evals_at=[20, 40])
    figures = build_figures([lm], "tokens_seen", 0.6)
    seen = lm.metrics["tokens_seen"].tolist()
    assert list(figures["loss"].data[1].x) == seen
    assert list(figures["throughput"].data[0].x) == seen
    for name in ("accuracy", "perplexity"):  # evaluations sit at the tokens seen by their step
        assert list(figures[name].data[0].x) == [seen[19], seen[39]], name
    for name, figure in figures.items():
        assert figure.layout.xaxis.title.text == "tokens seen", name
        assert figure.layout.uirevision.startswith(f"{name}:tokens_seen"), name
        assert figure.layout.xaxis.tickformat == ",d", name
        assert not annotations(figure) or annotations(figure) in ([NO_SCALER], [NO_COLLECTIVES]), name


def test_against_tokens_seen_image_runs_are_left_out_and_the_charts_say_so():
    image, lm = run(30, "img", evals_at=[30], fp16=True), lm_run(30, "lm", evals_at=[30], fp16=True)
    figures = build_figures([image, lm], "tokens_seen", 0.6)
    for name, figure in figures.items():
        if name == "collectives":
            continue  # one-process runs: nothing drawn there, a line on the page instead (views.applicable)
        drawn = {trace.legendgroup for trace in figure.data if not trace.uid.startswith("key-")}
        assert drawn == {"lm"}, name
        # perplexity is a chart of language runs only, whatever the x axis: nothing to say there
        assert (LEFT_OUT in annotations(figure)) == (name != "perplexity"), name
        colours = {t.line.color for t in figure.data if t.line.color and not t.uid.startswith("key-")}
        assert colours <= {PALETTE[1]}, name  # lm keeps its colour
    # Against steps both are drawn, and the throughput chart gives each unit its own axis.
    by_step = build_figures([image, lm], "step", 0.6)
    assert {t.legendgroup for t in by_step["loss"].data} == {"img", "lm"}
    throughput = by_step["throughput"]
    (samples,), (tokens,) = ([t for t in throughput.data if t.legendgroup == g and t.showlegend is not False]
                             for g in ("img", "lm"))
    assert samples.name == "img samples/s" and samples.yaxis in (None, "y")
    assert tokens.name == "lm tokens/s" and tokens.yaxis == "y2"
    assert throughput.layout.yaxis.title.text == "samples/s (image runs)"
    assert throughput.layout.yaxis2.title.text == "tokens/s (language runs)" and throughput.layout.yaxis2.side == "right"
    accuracy = by_step["accuracy"]
    assert [t.name for t in accuracy.data] == ["img", "lm (tokens)"] and "token accuracy" in accuracy.layout.title.text
    assert [t.name for t in by_step["perplexity"].data] == ["lm"]


def test_against_tokens_seen_image_runs_alone_fall_back_to_steps():
    image = run(30, "img", evals_at=[30])
    figures = build_figures([image], "tokens_seen", 0.6)
    steps = build_figures([image], "step", 0.6)
    assert list(figures) == list(CHARTS)
    for name in CHARTS:
        assert [list(t.x) for t in figures[name].data] == [list(t.x) for t in steps[name].data], name
        assert figures[name].layout.uirevision == steps[name].layout.uirevision, name
        assert "no run here counts tokens" in figures[name].layout.xaxis.title.text, name
    assert throughput_figure([], "tokens_seen").layout.annotations[0].text == WAITING


def test_the_tokens_axis_note_names_the_runs_it_leaves_out():
    assert tokens_axis_note([], 1) is None
    note = tokens_axis_note(["mlp b=32 k=4 · abc123"], 1)
    assert "mlp b=32 k=4 · abc123" in note and "count no tokens" in note and "optimizer step" in note
    assert "use optimizer steps" in tokens_axis_note(["mlp b=32 k=4 · abc123"], 0)


def test_a_language_run_without_evaluations_yet_says_so():
    figures = build_figures([lm_run(5)], "tokens_seen", 0.6)
    assert annotations(figures["perplexity"]) == [NO_EVALS] and annotations(figures["accuracy"]) == [NO_EVALS]


def test_a_real_gpt_run_draws_without_errors():
    rows, eval_rows = [], []

    class ListSink:
        def log_step(self, row):
            rows.append(row)

        def log_eval(self, row):
            eval_rows.append(row)

    config = RunConfig(model="gpt", dataset="pydoc", max_seq_len=16, micro_batch_size=2, accum_steps=2, device="cpu",
                       max_steps=3, eval_every=3)
    Engine(config).run(ListSink())
    real = RunSeries("real", "gpt b=2 k=2", pd.DataFrame(rows), pd.DataFrame(eval_rows))
    assert is_language(real)
    figures = build_figures([real], "tokens_seen", 0.6)
    assert list(figures["loss"].data[1].x) == [r["tokens_seen"] for r in rows]
    assert list(figures["perplexity"].data[0].y) == pytest.approx([eval_rows[-1]["perplexity"]])
    for figure in figures.values():
        figure.to_json()


def test_throughput_is_smoothed_like_the_loss_over_its_faint_raw_line():
    noisy = run(50)
    noisy.metrics["samples_per_s"] = np.where(np.arange(50) % 2, 1000.0, 3000.0)  # every other step slow
    raw_only = throughput_figure([noisy], "step", smoothing=0.0)
    assert len(raw_only.data) == 1 and np.ptp(np.asarray(raw_only.data[0].y, dtype=float)) == 2000.0
    smoothed = throughput_figure([noisy], "step", smoothing=0.9)
    raw, line = smoothed.data
    assert raw.showlegend is False and raw.opacity == 0.3
    ys = np.asarray(line.y, dtype=float)
    assert np.ptp(ys[10:]) < 500 and abs(ys[-1] - 2000.0) < 300  # the mean speed, not the zigzag


def test_every_trace_uid_is_css_safe():
    """plotly.js builds CSS selectors from uids ('.cbkey' + uid): a space or a bracket made Plotly.react
    and Plotly.purge throw, and the memory chart said "This chart could not be drawn"."""
    import re

    runs = [run(20, "20261124-081356-e1397b", evals_at=[10, 20], fp16=True), run(20, "b c(d)", cuda=True)]
    for name, figure in build_figures(runs, "step", 0.6).items():
        for trace in figure.data:
            assert re.fullmatch(r"[A-Za-z0-9_-]+", trace.uid), (name, trace.uid)


# --- collectives and memory per rank ---------------------------------------------------------

def sharded_run(n, label, sync="every", k=4, units=3, grad_mb=0.0655):
    """A 2-process FSDP run's rows: reduce-scatters per unit and synced micro-batch, all-gathers twice that per
    micro-batch (forward and backward), the gradient kept between micro-batches (1/N with every, all with last)."""
    synced = k if sync == "every" else 1
    frame = metrics(n).assign(world_size=2, reduce_scatter_calls=units * synced,
                              reduce_scatter_bytes=int(synced * grad_mb * 2**20), all_gather_calls=2 * units * k,
                              all_gather_bytes=int(2 * k * grad_mb * 2**20),
                              grad_kept_mb=grad_mb / 2 if sync == "every" else grad_mb)
    return RunSeries(run_id=label, label=label, metrics=frame, evals=evals([]))


def test_the_collectives_chart_draws_each_runs_calls_per_step_by_kind_with_the_bytes_in_the_hover():
    every, last, ddp = sharded_run(6, "fsdp/every"), sharded_run(6, "fsdp/last", sync="last"), ddp_run(6, "ddp")
    figure = collectives_figure([ddp, every, last], "step")
    lines = [t for t in figure.data if not t.uid.startswith("key-") and not t.uid.endswith("--legend")]
    by_run_kind = {(t.legendgroup, t.uid.rsplit("--", 1)[1]): t for t in lines}
    assert set(by_run_kind) == {("ddp", "allreduce"), ("fsdp/every", "reduce_scatter"), ("fsdp/every", "all_gather"),
                                ("fsdp/last", "reduce_scatter"), ("fsdp/last", "all_gather")}
    assert list(by_run_kind["fsdp/every", "reduce_scatter"].y) == [12] * 6  # 3 units x k=4 micro-batches
    assert list(by_run_kind["fsdp/last", "reduce_scatter"].y) == [3] * 6  # k times fewer
    assert list(by_run_kind["ddp", "allreduce"].customdata) == pytest.approx([4.0] * 6)  # MB, in the hover
    assert "reduce-scatters" in by_run_kind["fsdp/last", "reduce_scatter"].hovertemplate
    assert "MB" in by_run_kind["fsdp/last", "reduce_scatter"].hovertemplate
    # Colour tells the runs apart, the dash the kind; one legend entry per run and one per kind.
    dashes = {kind: t.line.dash for (_, kind), t in by_run_kind.items()}
    assert len(set(dashes.values())) == 3
    assert sorted(t.name for t in figure.data if t.showlegend) == sorted(
        ["ddp", "fsdp/every", "fsdp/last", "reduce-scatter", "all-gather", "all-reduce"])
    assert not any(t.showlegend for t in lines)  # a run's entry is a plain line in its colour, not its first kind's
    assert {t.line.dash for t in figure.data if t.uid.endswith("--legend")} == {None}
    assert len({t.line.color for t in lines}) == 3
    assert figure.layout.yaxis.rangemode == "tozero" and not annotations(figure)


def test_one_process_runs_have_no_collectives_chart_only_a_line():
    figure = collectives_figure([run(5, "a")], "step")
    assert not figure.data and annotations(figure) == [NO_COLLECTIVES]
    assert "collectives" in not_applicable([run(5, "a")])
    assert "collectives" not in not_applicable([run(5, "a"), sharded_run(5, "b")])


def test_the_memory_chart_of_several_processes_is_per_rank_and_shows_what_sharding_keeps():
    every, last, ddp = sharded_run(6, "fsdp/every"), sharded_run(6, "fsdp/last", sync="last"), ddp_run(6, "ddp")
    figure = memory_figure([ddp, every, last], "step")
    assert "per rank" in figure.layout.title.text and "largest rank" in figure.layout.title.subtitle.text
    assert "per rank" in figure.layout.yaxis.title.text
    kept = {t.legendgroup: list(t.y) for t in figure.data if t.uid.endswith("--grad_kept_mb")}
    assert kept["fsdp/every"] == pytest.approx([0.0655 / 2] * 6) and kept["fsdp/last"] == pytest.approx([0.0655] * 6)
    assert set(kept) == {"ddp", "fsdp/every", "fsdp/last"}
    assert "gradients kept between micro-batches" in [t.name for t in figure.data if t.uid.startswith("key-")]
    single = memory_figure([run(6, "a")], "step")  # one process: the figures are the process's, no kept line
    assert "per rank" not in single.layout.title.text
    assert not [t for t in single.data if t.uid.endswith("--grad_kept_mb")]


def test_runs_that_call_as_many_collectives_stay_visible_under_each_other():
    every, last = sharded_run(4, "fsdp/every"), sharded_run(4, "fsdp/last", sync="last")
    figure = collectives_figure([every, last], "step")
    gathers = {t.legendgroup: t for t in figure.data if t.uid.endswith("--all_gather")}
    assert list(gathers["fsdp/every"].y) == list(gathers["fsdp/last"].y)  # the same all-gathers per step
    assert gathers["fsdp/every"].line.width > gathers["fsdp/last"].line.width  # the earlier one shows around it
    assert gathers["fsdp/last"].line.width == 2  # the line on top, like every line nothing covers
    scatters = {t.legendgroup: t.line.width for t in figure.data if t.uid.endswith("--reduce_scatter")}
    assert scatters == {"fsdp/every": 2, "fsdp/last": 2}  # 12 and 3 per step: apart, both thin

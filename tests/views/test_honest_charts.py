"""Charts that show the truth: axes that fit the data, runs gone wild clipped with a note, the training
memory accumulation saves, charts that do not apply said in one line, a colour per run on every page."""

import numpy as np
import pandas as pd
import pytest

from gaccum_core.config import RunConfig
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper
from gaccum_core.views.applicable import not_applicable
from gaccum_core.views.chart_cache import ChartCache, ChartInput
from gaccum_core.views.charts import build_figures, loss_figure
from gaccum_core.views.colours import PALETTE, run_colours
from gaccum_core.views.lab import gradient_figure
from gaccum_core.views.memory_chart import memory_figure
from gaccum_core.views.series import RunSeries
from test_charts import annotations, ddp_run, evals, metrics, run  # the same hand-made rows (tests/views on sys.path)


def series(run_id, frame, colour=None):
    return RunSeries(run_id, run_id, frame, evals([]), colour)


# --- axes ------------------------------------------------------------------------------------

def test_a_constant_learning_rate_is_drawn_around_its_value_not_on_minus_one_to_one():
    figure = build_figures([series("a", metrics(20).assign(lr=0.05))], "step", 0.6)["lr"]
    assert tuple(figure.layout.yaxis.range) == pytest.approx((0.0, 0.1))
    varying = build_figures([series("a", metrics(20).assign(lr=np.linspace(0.05, 0.01, 20)))], "step", 0.6)["lr"]
    assert varying.layout.yaxis.range is None  # plotly's own range when the values vary


def test_skipped_steps_never_get_a_negative_range_and_tick_whole_steps():
    figures = build_figures([run(20, "a")], "step", 0.6)  # no step skipped: a constant 0
    skipped = figures["skipped"].layout.yaxis
    assert skipped.rangemode == "nonnegative" and tuple(skipped.range) == (0, 1) and skipped.dtick == 1
    some = build_figures([run(20, "a", fp16=True)], "step", 0.6)["skipped"].layout.yaxis
    assert some.rangemode == "nonnegative" and some.dtick == 1 and some.range is None


def test_one_point_gets_one_tick_per_step_so_no_label_repeats():
    for name, figure in build_figures([ddp_run(1, "a", evals_at=[1], fp16=True)], "step", 0.6).items():
        assert figure.layout.xaxis.dtick == 1 and figure.layout.xaxis.tickformat == ",d", name
    long = build_figures([run(50, "a")], "step", 0.6)["loss"]
    assert long.layout.xaxis.dtick is None  # plotly's ticks are whole numbers on a long axis


def test_the_legend_of_many_runs_sits_under_the_x_title_and_the_margin_grows_with_it():
    one = build_figures([run(10, "a")], "step", 0.6)["memory"]
    many = build_figures([run(10, f"mlp b={2 ** i} k={64 // 2 ** i} · try {i}") for i in range(6)], "step", 0.6)
    memory = many["memory"]
    for figure in (one, memory):
        legend = figure.layout.legend
        assert (legend.orientation, legend.yref, legend.y, legend.yanchor) == ("h", "container", 0, "bottom")
    assert memory.layout.margin.b >= one.layout.margin.b + 2 * 20  # 6 long run labels: two more rows at least
    assert memory.layout.height - memory.layout.margin.b == one.layout.height - one.layout.margin.b  # same plot


def test_the_equivalence_error_chart_starts_at_zero():
    table = pd.DataFrame({"name": ["w", "b"], "rel_l2": [7.5e-8, 1.2e-7], "max_abs_diff": [1e-9, 2e-9],
                          "cosine": [1.0, 1.0]})
    figure = gradient_figure(table)
    assert figure.layout.yaxis.type == "linear" and figure.layout.yaxis.rangemode == "tozero"
    assert list(figure.data[0].y) == [7.5e-8, 1.2e-7]


# --- a run gone wild -------------------------------------------------------------------------

def many_runs(diverged=True):
    runs = [series(f"run {i}", metrics(60, seed=i)) for i in range(8)]
    if diverged:
        wild = runs[3].metrics.copy()
        wild.loc[55:, "loss"] = [1e5, 1e12, 1e20, 1e28, 3e32]
        runs[3] = series("run 3", wild)
    return runs


def test_a_diverged_run_does_not_flatten_the_others_and_the_chart_says_so():
    runs = many_runs()
    figure = loss_figure(runs, "step", 0.6)
    low, high = figure.layout.yaxis.range
    calm = np.concatenate([r.metrics["loss"].to_numpy() for r in runs[:3] + runs[4:]])
    assert low <= calm.min() and calm.max() <= high < 5  # every other curve (2 → 0.7 with noise) fills the chart
    (note,) = [text for text in annotations(figure) if text.startswith("y clipped to")]
    assert "run 3" in note and "3e+32" in note and "run 0" not in note
    calm = loss_figure(many_runs(diverged=False), "step", 0.6)
    assert calm.layout.yaxis.range is None and not annotations(calm)
    logged = loss_figure(many_runs(), "step", 0.6, log_y=True)
    assert logged.layout.yaxis.range is None and not annotations(logged)  # a log axis shows it all


def test_a_loss_that_starts_high_and_falls_fast_is_not_clipped():
    frame = metrics(200).assign(loss=1.5 + 4 * np.exp(-np.arange(200) / 5))
    figure = loss_figure([series("gpt", frame)], "step", 0.0)
    assert figure.layout.yaxis.range is None and not annotations(figure)


# --- memory ----------------------------------------------------------------------------------

def trained(b, k):
    sink = RowKeeper()
    Engine(RunConfig(device="cpu", model="cnn", micro_batch_size=b, accum_steps=k, max_steps=2)).run(
        sink, evaluate=False)
    return series(f"b={b} k={k}", pd.DataFrame(sink.steps))


def test_the_memory_chart_shows_what_accumulation_saves():
    small, large = trained(8, 4), trained(32, 1)
    figure = memory_figure([small, large], "step")
    by_name = {t.name: np.asarray(t.y, dtype=float) for t in figure.data}
    saved = by_name["b=32 k=1 activations"][-1] - by_name["b=8 k=4 activations"][-1]
    assert saved > 0 and by_name["b=32 k=1 activations"][-1] > 3 * by_name["b=8 k=4 activations"][-1]
    # The main line of each run is its training memory: they differ by exactly the activations saved.
    assert by_name["b=32 k=1"][-1] - by_name["b=8 k=4"][-1] == pytest.approx(saved)
    # The process's resident memory (hundreds of MB) is on its own axis, not the one the runs compare on.
    rss = [t for t in figure.data if t.name.endswith("process memory (RSS)")]
    assert len(rss) == 2 and all(t.yaxis == "y2" for t in rss)
    assert all(t.yaxis is None for t in figure.data if t not in rss)


# --- charts that do not apply ----------------------------------------------------------------

def test_charts_that_do_not_apply_say_so_in_one_line():
    plain = [run(10, "a"), run(10, "b")]
    notes = not_applicable(plain)
    assert set(notes) == {"scale", "skipped", "cache", "perplexity", "collectives"}
    assert all("not applicable" in line and "\n" not in line for line in notes.values())
    assert "fp16" in notes["scale"] and "clear_cache" in notes["cache"]
    fp16 = not_applicable([run(10, "a"), run(10, "b", fp16=True)])
    assert "scale" not in fp16 and "skipped" not in fp16
    clearing = series("c", metrics(10).assign(cache_clear_s=0.002))
    assert "cache" not in not_applicable([run(10, "a"), clearing])
    assert "collectives" not in not_applicable([run(10, "a"), ddp_run(10, "b")])
    assert "one process" in notes["collectives"]
    assert not_applicable([]) == {}  # before the first step the charts wait: nothing decided yet


def rows(n):
    return tuple(dict(row) for row in metrics(n).to_dict("records"))


def test_the_chart_set_names_the_charts_that_do_not_apply_and_keeps_every_spec():
    charts = ChartCache().charts([ChartInput("r1", "mlp b=8 k=4", rows(5), ())], "step", 0.6)
    assert set(charts.not_applicable) == {"scale", "skipped", "cache", "collectives"}
    assert "scale" in charts.specs  # the existing API still draws every chart
    assert list(charts.applicable()) == [name for name in charts.specs if name not in charts.not_applicable]


# --- a colour per run ------------------------------------------------------------------------

def test_a_run_keeps_its_colour_whichever_runs_are_shown_beside_it():
    on_disk = ["20250101-100000-aaaaaa", "20250101-100500-bbbbbb-fp16", "20250101-101000-cccccc"]
    colours = run_colours(list(reversed(on_disk)))  # any order: creation order decides
    assert [colours[r] for r in on_disk] == list(PALETTE[:3])
    alone = build_figures([series(on_disk[2], metrics(5), colours[on_disk[2]])], "step", 0.6)
    beside = build_figures([series(r, metrics(5), colours[r]) for r in on_disk], "step", 0.6)
    colour_of = lambda figure, run_id: {t.line.color for t in figure.data if t.legendgroup == run_id}  # noqa: E731
    for name in ("loss", "memory", "throughput"):
        assert colour_of(alone[name], on_disk[2]) == colour_of(beside[name], on_disk[2]) == {PALETTE[2]}, name
    cache = ChartCache()
    live = cache.charts([ChartInput(on_disk[2], "c", rows(3), (), colours[on_disk[2]])], "step", 0.6)
    assert PALETTE[2] in live.specs["loss"] and PALETTE[0] not in live.specs["loss"]

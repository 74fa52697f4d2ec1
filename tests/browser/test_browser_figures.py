"""The figures the pages send, as plotly.js draws them in Chromium (read back from plotly.js's own state), on one
page with plotly.js loaded that the file's tests share (a Chromium launch and plotly.js's parse cost seconds of CPU
on a machine the whole suite shares).

- The live charts, redrawn in place as a live page does (Plotly.react with the same uirevision): each redraw shows
  its data, whatever the figure before it.
- Issue 33 item 10: on the memory chart of a real CPU run, the process-memory (RSS) line on the right axis and the
  training-memory line on the left are drawn apart. Each axis ended just above its own maximum, so the faint RSS
  line lay under the thick training line, invisible.
- The Sweeps page's figures: the parallel coordinates carry each cell's settings and outcomes, the loss bands span
  mean ± the 95 % interval."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pandas as pd
import plotly
import pytest
from playwright.sync_api import Page, sync_playwright

from chromium import CHROMIUM, CHROMIUM_ARGS, require_chromium
from gaccum_core.config import RunConfig
from gaccum_core.execution.runner import Runner
from gaccum_core.sweeps.members import Member
from gaccum_core.sweeps.spec import SweepSpec
from gaccum_core.sweeps.summary import RunResult, summary_of
from gaccum_core.train.metrics import EVAL_COLUMNS, STEP_COLUMNS
from gaccum_core.views.chart_cache import figure_json
from gaccum_core.views.charts import build_figures
from gaccum_core.views.memory_chart import memory_figure
from gaccum_core.views.series import RunSeries
from gaccum_core.views.sweep_charts import loss_band_figure, parallel_figure

pytestmark = pytest.mark.browser
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


@pytest.fixture(scope="module")
def graph() -> Iterator[Callable[[int, int], Page]]:
    """graph(width, height): the page of one Chromium with plotly.js loaded, its one graph div (#graph) sized so."""
    require_chromium()
    with sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_content("<div id='graph'></div>")
        page.add_script_tag(path=str(PLOTLY_JS))

        def sized(width: int, height: int) -> Page:
            page.evaluate("([w, h]) => { const g = document.getElementById('graph'); Plotly.purge(g); "
                          "g.style.width = w + 'px'; g.style.height = h + 'px'; }", [width, height])
            return page

        yield sized
        browser.close()


# --- a live chart follows its data ------------------------------------------------------------------------------

# Draws each figure in turn on one graph, as the live chart does; each chart's drawn y range after each.
REACT_JS = """async (figures) => {
    const graph = document.getElementById('graph');
    const ranges = [];
    for (const json of figures) {
        const figure = JSON.parse(json);
        await Plotly.react(graph, figure.data, figure.layout);
        ranges.push([graph._fullLayout.yaxis.range, graph._fullLayout.yaxis.autorange]);
    }
    Plotly.purge(graph);
    return ranges;
}"""


def rows(n: int) -> pd.DataFrame:
    step = np.arange(1, n + 1)
    frame = pd.DataFrame({column: 0.0 for column in STEP_COLUMNS}, index=range(n))
    frame = frame.assign(step=step, samples_seen=32 * step, loss=2.3 * np.exp(-step / 10), lr=0.05,
                         grad_norm=np.linspace(4, 0.5, n), samples_per_s=np.linspace(900, 1300, n),
                         wall_time_s=0.01 * step, train_mem_mb=0.3, activation_mb=0.1, mem_allocated_mb=500.0,
                         skipped=0, skipped_total=0, scale=np.nan, mem_reserved_mb=np.nan, mem_peak_mb=np.nan,
                         tokens=np.nan, tokens_seen=np.nan, tokens_per_s=np.nan)  # an image run
    return frame[list(STEP_COLUMNS)]


def figures(n: int) -> dict[str, str]:
    run = RunSeries("r", "cnn b=32 k=4", rows(n), pd.DataFrame(columns=EVAL_COLUMNS))
    return {name: figure_json(figure) for name, figure in build_figures([run], "step", 0.6).items()}


def test_a_live_chart_follows_its_data_after_a_first_point_drawn_on_a_set_range(graph):
    """The first row's figures set a y range (one point: a range around its value); later figures leave
    the range to plotly. Without autorange said on each, plotly.js kept it off under the same uirevision
    and drew the run on its empty default [-1, 4]: the throughput line was off the chart."""
    sequence = [figures(0), figures(1), figures(40)]
    page = graph(600, 340)
    drawn = {name: page.evaluate(REACT_JS, [figs[name] for figs in sequence])
             for name in ("loss", "throughput", "grad_norm")}
    last = rows(40)
    for name, column in (("loss", "loss"), ("throughput", "samples_per_s"), ("grad_norm", "grad_norm")):
        (low, high), autorange = drawn[name][-1]
        assert autorange, name
        assert low <= last[column].min() and high >= last[column].max(), (name, low, high)


# --- issue 33 item 10: the process-memory line apart from the training-memory line -------------------------------

# Each line's points in pixels from the plot's top (on its own y axis), as plotly.js placed them.
PIXELS_JS = """async (json) => {
    const graph = document.getElementById('graph');
    const figure = JSON.parse(json);
    await Plotly.newPlot(graph, figure.data, figure.layout);
    const lines = {};
    for (const trace of graph._fullData) {
        if (!trace.y || trace.y.every(v => v === null)) continue;  // the legend's keys
        const axis = graph._fullLayout[trace.yaxis === 'y2' ? 'yaxis2' : 'yaxis'];
        lines[trace.name] = Array.from(trace.y, v => axis.l2p(v));
    }
    return [lines, graph._fullLayout._size.h];
}"""
APART_PX = 20  # the thick training line is 2.5 px wide: 20 px between the lines leaves the faint one in plain view


def test_the_process_memory_line_is_drawn_apart_from_the_training_memory_line(graph, tmp_path):
    runner = Runner(tmp_path, executor="thread")
    run_id = runner.submit(RunConfig(device="cpu", model="cnn", max_steps=6))
    assert runner.wait(run_id, timeout=120).state == "finished"
    run = RunSeries(run_id, "cnn b=32 k=4", runner.store.read_metrics(run_id), runner.store.read_evals(run_id))
    figure = memory_figure([run], "step")
    lines, height = graph(520, 340).evaluate(PIXELS_JS, figure_json(figure))
    training, rss = lines["cnn b=32 k=4"], lines["cnn b=32 k=4 process memory (RSS)"]
    assert len(training) == len(rss) == 6
    gaps = [abs(a - b) for a, b in zip(training, rss)]
    assert min(gaps) >= APART_PX, (gaps, training, rss)
    for line in (training, rss):  # both inside the plot, neither squeezed against its edge
        assert all(2 <= y <= height - 2 for y in line), (line, height)


# --- the Sweeps page's figures ----------------------------------------------------------------------------------

DRAW_JS = """async (json) => {
    const figure = JSON.parse(json);
    const graph = document.getElementById('graph');
    await Plotly.newPlot(graph, figure.data, figure.layout);
    const drawn = graph._fullData.map(t => ({type: t.type, name: t.name, fill: t.fill, x: Array.from(t.x || []),
        y: Array.from(t.y || []), visible: t.visible,
        dimensions: (t.dimensions || []).map(d => ({label: d.label, values: Array.from(d.values),
                                                    ticktext: d.ticktext}))}));
    Plotly.purge(graph);
    return drawn;
}"""
SPEC = SweepSpec(grid=(("micro_batch_size", (8, 32)), ("amp", ("off", "bf16"))),
                 common=(("model", "mlp"), ("device", "cpu")), repeats=2, effective_batch=64)
STEPS = 12


def run_frames(cell: int, repeat: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A run's metrics: a falling loss that each cell and repeat shift a little, a speed per cell."""
    step = np.arange(1, STEPS + 1)
    frame = pd.DataFrame({c: 0.0 for c in STEP_COLUMNS}, index=range(STEPS)).assign(
        step=step, samples=64, samples_seen=64 * step, loss=2.3 * np.exp(-step / 6) + 0.01 * cell + 0.02 * repeat,
        samples_per_s=1000.0 * (cell + 1) + 10 * repeat, train_mem_mb=0.5 * (cell + 1), tokens_seen=np.nan)
    evals = pd.DataFrame([{c: 0.0 for c in EVAL_COLUMNS} | {"test_accuracy": 0.9}])
    return frame, evals


def summary():
    results = [RunResult(cell, repeat, f"r{cell}{repeat}", *run_frames(cell, repeat))
               for cell in range(4) for repeat in range(2)]
    members = {(r.cell, r.repeat): Member(r.run_id, "finished") for r in results}
    return summary_of(SPEC, results, members)


def test_parallel_coordinates_and_loss_bands_as_drawn(graph):
    found = summary()
    page = graph(1000, 420)
    parallel, bands = [page.evaluate(DRAW_JS, figure.to_json())
                       for figure in (parallel_figure(found.table, list(SPEC.fields)),
                                      loss_band_figure(found.curves, smoothing=0.0))]

    (coordinates,) = parallel
    assert coordinates["type"] == "parcoords"
    axes = {d["label"]: d for d in coordinates["dimensions"]}
    assert list(axes) == ["b", "precision", "samples/s", "peak memory (MB)", "final loss"]
    assert axes["b"]["values"] == [8, 8, 32, 32]
    assert axes["precision"]["ticktext"] == ["fp32", "bf16"]
    # each cell's speed: the mean over its two repeats of its steps' median after warm-up
    assert axes["samples/s"]["values"] == pytest.approx([1000.0 * (c + 1) + 5 for c in range(4)])
    # each cell's final loss: the mean over its repeats of their last epoch's sample-weighted loss (one epoch here)
    expected = [statistics.fmean(run_frames(c, r)[0]["loss"].mean() for r in range(2)) for c in range(4)]
    assert axes["final loss"]["values"] == pytest.approx(expected)

    fills = [t for t in bands if t["fill"] == "toself"]
    lines = [t for t in bands if t["fill"] != "toself"]
    assert len(fills) == len(lines) == 4
    t_one_dof = math.tan(math.pi * (0.975 - 0.5))
    for cell, (fill, line) in enumerate(zip(fills, lines)):
        assert line["x"] == [64 * s for s in range(1, STEPS + 1)]
        repeats = [run_frames(cell, r)[0]["loss"].to_numpy() for r in range(2)]
        mean = [statistics.fmean(pair) for pair in zip(*repeats)]
        half = [t_one_dof * statistics.stdev(pair) / math.sqrt(2) for pair in zip(*repeats)]
        assert line["y"] == pytest.approx(mean)
        upper, lower = fill["y"][:STEPS], fill["y"][STEPS:][::-1]
        assert upper == pytest.approx([m + h for m, h in zip(mean, half)])
        assert lower == pytest.approx([m - h for m, h in zip(mean, half)])

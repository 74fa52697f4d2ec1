"""The Sweeps page's figures as plotly.js draws them in Chromium (read back from _fullData): the parallel
coordinates carry each cell's settings and outcomes, the loss bands span mean ± the 95 % interval."""

import math
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import plotly
import pytest
from playwright.sync_api import sync_playwright

from chromium import CHROMIUM, CHROMIUM_ARGS, require_chromium
from gaccum_core.sweeps.members import Member
from gaccum_core.sweeps.spec import SweepSpec
from gaccum_core.sweeps.summary import RunResult, summary_of
from gaccum_core.train.metrics import EVAL_COLUMNS, STEP_COLUMNS
from gaccum_core.views.sweep_charts import loss_band_figure, parallel_figure

pytestmark = pytest.mark.browser
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
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


def draw(figures):
    require_chromium()
    with sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_content("<div id='graph' style='width:1000px;height:420px'></div>")
        page.add_script_tag(path=str(PLOTLY_JS))
        drawn = [page.evaluate(DRAW_JS, figure.to_json()) for figure in figures]
        browser.close()
    return drawn


def test_parallel_coordinates_and_loss_bands_as_drawn():
    found = summary()
    parallel, bands = draw([parallel_figure(found.table, list(SPEC.fields)), loss_band_figure(found.curves, smoothing=0.0)])

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

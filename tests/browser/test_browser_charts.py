"""The live charts' figures as plotly.js draws them in Chromium, redrawn in place as a live page does
(Plotly.react with the same uirevision): each redraw shows its data, whatever the figure before it."""

from pathlib import Path

import numpy as np
import pandas as pd
import plotly
import pytest
from playwright.sync_api import sync_playwright

from chromium import CHROMIUM, CHROMIUM_ARGS, require_chromium
from gaccum_core.train.metrics import EVAL_COLUMNS, STEP_COLUMNS
from gaccum_core.views.chart_cache import figure_json
from gaccum_core.views.charts import build_figures
from gaccum_core.views.series import RunSeries

pytestmark = pytest.mark.browser
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
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


def test_a_live_chart_follows_its_data_after_a_first_point_drawn_on_a_set_range():
    """The first row's figures set a y range (one point: a range around its value); later figures leave
    the range to plotly. Without autorange said on each, plotly.js kept it off under the same uirevision
    and drew the run on its empty default [-1, 4]: the throughput line was off the chart."""
    require_chromium()
    sequence = [figures(0), figures(1), figures(40)]
    with sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_content("<div id='graph' style='width:600px;height:340px'></div>")
        page.add_script_tag(path=str(PLOTLY_JS))
        drawn = {name: page.evaluate(REACT_JS, [figs[name] for figs in sequence])
                 for name in ("loss", "throughput", "grad_norm")}
        browser.close()
    last = rows(40)
    for name, column in (("loss", "loss"), ("throughput", "samples_per_s"), ("grad_norm", "grad_norm")):
        (low, high), autorange = drawn[name][-1]
        assert autorange, name
        assert low <= last[column].min() and high >= last[column].max(), (name, low, high)

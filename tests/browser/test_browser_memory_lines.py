"""Issue 33 item 10 in Chromium: on the memory chart of a real CPU run, the process-memory (RSS) line on the right
axis and the training-memory line on the left are drawn apart. Each axis ended just above its own maximum, so the
faint RSS line lay under the thick training line, invisible."""

from pathlib import Path

import plotly
import pytest
from playwright.sync_api import sync_playwright

from chromium import CHROMIUM, CHROMIUM_ARGS, require_chromium
from gaccum_core.config import RunConfig
from gaccum_core.runs.runner import Runner
from gaccum_core.views.chart_cache import figure_json
from gaccum_core.views.memory_chart import memory_figure
from gaccum_core.views.series import RunSeries

pytestmark = pytest.mark.browser
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
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


def test_the_process_memory_line_is_drawn_apart_from_the_training_memory_line(tmp_path):
    require_chromium()
    runner = Runner(tmp_path, executor="thread")
    run_id = runner.submit(RunConfig(device="cpu", model="cnn", max_steps=6))
    assert runner.wait(run_id, timeout=120).state == "finished"
    run = RunSeries(run_id, "cnn b=32 k=4", runner.store.read_metrics(run_id), runner.store.read_evals(run_id))
    figure = memory_figure([run], "step")
    with sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_content("<div id='graph' style='width:520px;height:340px'></div>")
        page.add_script_tag(path=str(PLOTLY_JS))
        lines, height = page.evaluate(PIXELS_JS, figure_json(figure))
        browser.close()
    training, rss = lines["cnn b=32 k=4"], lines["cnn b=32 k=4 process memory (RSS)"]
    assert len(training) == len(rss) == 6
    gaps = [abs(a - b) for a, b in zip(training, rss)]
    assert min(gaps) >= APART_PX, (gaps, training, rss)
    for line in (training, rss):  # both inside the plot, neither squeezed against its edge
        assert all(2 <= y <= height - 2 for y in line), (line, height)

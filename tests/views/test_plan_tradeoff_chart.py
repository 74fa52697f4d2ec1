"""The Plan page's speed-against-memory chart (issue 40, item 7): its y axis starts at 0 whatever the error bars,
and its point labels overlap neither each other nor a point (drawn by plotly.js in Chromium); a label left off
for want of room is in the point's hover."""

from pathlib import Path

import plotly
import pytest
from playwright.sync_api import sync_playwright

from chromium import CHROMIUM, CHROMIUM_ARGS, require_chromium
from gaccum_core.config import RunConfig
from gaccum_core.plan.planner import Plan, PlanRequest
from gaccum_core.plan.search import FITS, Candidate, Options
from gaccum_core.views.chart_cache import figure_json
from gaccum_core.views.plan import LEVER, RECOMMENDED, tradeoff_figure
from gaccum_core.views.point_labels import label_places

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
FP32, STEP, BF16 = Options(), Options(clear_cache="step"), Options(amp="bf16")
FULL = Options(activation_checkpointing="full")


def _crowded_plan() -> Plan:
    """A gpt plan in 3 MB as a 2-core CPU times it: the sizes of four option combinations within 0.8 MB of each
    other, cache clearing (a no-op on the CPU) on top of fp32's points, one interval wider than its speed."""
    def timed(options: Options, b: int, peak: float, speed: float, error: float) -> Candidate:
        return Candidate(options, b, 64 // b, FITS, peak, speed, b / speed, samples_per_s_error=error, timed_steps=3)

    candidates = [timed(FP32, 2, 2.12, 540.0, 60.0), timed(FP32, 1, 1.82, 300.0, 420.0),
                  timed(STEP, 2, 2.12, 530.0, 70.0), timed(STEP, 1, 1.82, 310.0, 50.0),
                  timed(BF16, 4, 2.30, 600.0, 700.0), timed(BF16, 2, 1.90, 500.0, 40.0),
                  timed(FULL, 8, 2.59, 635.0, 51.0), timed(FULL, 4, 2.06, 580.0, 45.0)]
    request = PlanRequest(RunConfig(model="gpt", dataset="pydoc", micro_batch_size=1, accum_steps=1), 64, 3.0,
                          amp=("off", "bf16"), clear_cache=("off", "step"), activation_checkpointing=("off", "full"))
    return Plan(request, "cpu", "counted", candidates, recommended=candidates[6], reason="made up")


def test_the_y_axis_starts_at_0_and_reaches_past_the_highest_error_bar():
    plan = _crowded_plan()
    layout = tradeoff_figure(plan).layout
    assert layout.yaxis.range[0] == 0  # 300 ± 420 would draw its bar down to -120
    assert layout.yaxis.range[1] >= 600.0 + 700.0
    assert layout.xaxis.range[0] == 0 and layout.xaxis.range[1] >= 3.0  # the budget's line in view


def test_every_point_says_its_b_and_k_in_its_hover():
    figure = tradeoff_figure(_crowded_plan()).to_plotly_json()
    points = [(x, y, hover) for trace in figure["data"] if trace["meta"] in (LEVER, RECOMMENDED)
              for x, y, hover in zip(trace["x"], trace["y"], trace["hovertext"])]
    for candidate in _crowded_plan().candidates:
        hovers = [hover for x, y, hover in points if (x, y) == (candidate.peak_mb, candidate.samples_per_s)]
        assert any(f"b={candidate.micro_batch_size}" in h and f"k={candidate.accum_steps}" in h for h in hovers)


def test_the_same_words_on_a_point_drawn_on_top_of_another_are_said_once():
    on_top, beside = [(5.0, 5.0), (5.0, 5.01)], [(5.0, 5.0), (5.0, 5.01)]
    assert label_places(on_top, ["b=2 k=32", "b=2 k=32"], (0.0, 10.0), (0.0, 10.0))[1] is None
    first, second = label_places(beside, ["b=2 k=32", "b=4 k=16"], (0.0, 10.0), (0.0, 10.0))
    assert first and second and first != second  # other words: said on another side


def _boxes(figure: dict) -> tuple[list[dict], list[dict], float]:
    """The drawn labels' and markers' boxes in pixels, and the y axis's lowest value, as plotly.js lays them out
    in a 560×360 chart (the Plan page's at its narrowest)."""
    script = """async (json) => {
        const graph = document.getElementById('graph');
        const figure = JSON.parse(json);
        await Plotly.newPlot(graph, figure.data, figure.layout);
        const box = e => { const r = e.getBoundingClientRect(); return {l: r.left, t: r.top, r: r.right, b: r.bottom,
                                                                         text: e.textContent}; };
        const labels = Array.from(graph.querySelectorAll('.scatterlayer .textpoint text'))
            .filter(e => e.textContent.trim()).map(box);
        const markers = Array.from(graph.querySelectorAll('.scatterlayer .points path.point')).map(box);
        return [labels, markers, graph._fullLayout.yaxis.range[0]];
    }"""
    with sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_content("<div id='graph' style='width:560px;height:360px'></div>")
        page.add_script_tag(path=str(PLOTLY_JS))
        found = page.evaluate(script, figure)
        browser.close()
    return found


def _apart(a: dict, b: dict) -> bool:
    return a["r"] <= b["l"] or b["r"] <= a["l"] or a["b"] <= b["t"] or b["b"] <= a["t"]


@pytest.mark.browser
def test_drawn_labels_overlap_no_other_label_and_no_point():
    require_chromium()
    labels, markers, bottom = _boxes(figure_json(tradeoff_figure(_crowded_plan())))
    assert bottom >= 0
    assert len(labels) >= 4, labels  # room for some: not every label left off
    for i, label in enumerate(labels):
        assert all(_apart(label, other) for other in labels[i + 1:]), (label, labels)
        assert all(_apart(label, marker) for marker in markers), (label, [m for m in markers if not _apart(label, m)])

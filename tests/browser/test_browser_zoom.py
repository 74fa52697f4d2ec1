"""The Train page's charts keep what the user did to them while a run refreshes them every second:
a drag-zoom of the loss chart keeps its ranges, and a legend entry clicked off stays off, while
points keep arriving. Drives the real dashboard in Debian's Chromium, like test_browser.py."""

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from chromium import LOSS_POINTS_JS, dashboard_browser, start_a_long_mlp_run

pytestmark = [pytest.mark.timeout(600), pytest.mark.browser]

REFRESHES = 3  # live refreshes, each bringing new points, that the view must survive
WAIT_MS = 90_000  # per condition: a loaded 2-core machine trains and redraws slowly

# The loss chart's view and its traces' visibility, read from plotly.js's own state.
VIEW_JS = """() => {
    const plot = document.querySelector('.js-plotly-plot');
    if (!plot || !plot._fullLayout || !plot._fullData) return null;
    const {xaxis, yaxis} = plot._fullLayout;
    return {x: [...xaxis.range], y: [...yaxis.range], autorange: [xaxis.autorange, yaxis.autorange],
            visible: plot._fullData.map(trace => trace.visible)};
}"""
# The view once the loss chart is zoomed in both axes, else null.
ZOOMED_JS = f"() => {{ const v = ({VIEW_JS})(); return v && !v.autorange[0] && !v.autorange[1] ? v : null; }}"
# Points of the loss chart's first trace; unlike calcdata, counted for a trace hidden from the legend.
POINTS_JS = """() => {
    const plot = document.querySelector('.js-plotly-plot');
    return plot && plot._fullData && plot._fullData.length ? plot._fullData[0]._length || 0 : 0;
}"""


def start_a_long_run(page: Page, url: str) -> None:
    """An mlp run on the bundled digits, long enough to stay live for the whole test."""
    start_a_long_mlp_run(page, url, WAIT_MS)
    expect(page.get_by_text("mlp b=32 k=4").first).to_be_visible(timeout=WAIT_MS)  # the run's progress bar
    page.wait_for_function(f"() => ({LOSS_POINTS_JS})() >= 5", timeout=WAIT_MS)


def drag_zoom(page: Page) -> dict:
    """Drag a box over the middle of the loss chart's plot area; the view plotly.js then shows."""
    for _ in range(5):  # a chart redrawn from scratch mid-drag cuts the drag short: try again
        box = page.locator(".js-plotly-plot").first.locator(".nsewdrag").first.bounding_box()
        if not box:  # between two draws
            continue
        x0, y0 = box["x"] + box["width"] * 0.25, box["y"] + box["height"] * 0.25
        page.mouse.move(x0, y0)
        page.mouse.down()
        page.mouse.move(x0 + box["width"] * 0.25, y0 + box["height"] * 0.25, steps=8)
        page.mouse.move(x0 + box["width"] * 0.5, y0 + box["height"] * 0.5, steps=8)
        page.mouse.up()
        try:
            return page.wait_for_function(ZOOMED_JS, timeout=10_000).json_value()
        except PlaywrightTimeout:
            continue
    pytest.fail(f"five drags did not zoom the loss chart: {page.evaluate(VIEW_JS)}")


def survive_refreshes(page: Page, expected: dict, what: str) -> None:
    """Wait for REFRESHES redraws that each brought new points; the view must stay `expected` throughout."""
    points = page.evaluate(POINTS_JS)
    page.evaluate("() => { window.zoomTestGraph = document.querySelector('.js-plotly-plot'); }")
    for refresh in range(1, REFRESHES + 1):
        page.wait_for_function(f"() => ({POINTS_JS})() > {points}", timeout=WAIT_MS)
        points = page.evaluate(POINTS_JS)
        view = page.evaluate(VIEW_JS)
        redrawn = page.evaluate("() => document.querySelector('.js-plotly-plot') !== window.zoomTestGraph")
        how = "replaced by a new one" if redrawn else "updated in place"
        assert view == expected, f"{what} was lost at refresh {refresh} ({points} points, the graph {how}): {view}"


def test_zoom_and_hidden_legend_entries_survive_the_live_refresh(tmp_path: Path):
    with dashboard_browser(tmp_path / "runs") as (url, browser):
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        start_a_long_run(page, url)

        zoomed = drag_zoom(page)
        full = page.evaluate(f"() => ({LOSS_POINTS_JS})()")
        assert zoomed["x"][1] - zoomed["x"][0] < full, f"not zoomed in: {zoomed} over {full} points"
        survive_refreshes(page, zoomed, "the zoom")

        page.locator(".js-plotly-plot").first.locator(".legend .traces .legendtoggle").first.click()
        page.wait_for_function(f"() => ({VIEW_JS})().visible.every(v => v === 'legendonly')",
                               timeout=WAIT_MS)
        hidden = page.evaluate(VIEW_JS)
        assert hidden["x"] == zoomed["x"] and hidden["y"] == zoomed["y"]
        survive_refreshes(page, hidden, "the hidden legend entry (or the zoom)")

        page.locator(".st-key-stop button").click()
        expect(page.get_by_text("stopped").first).to_be_visible(timeout=WAIT_MS)

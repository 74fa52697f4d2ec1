"""The Train page live, in Debian's Chromium (runs in worker processes): every open tab follows the
device's runs, and the charts keep what the user did to them while a run refreshes them every second;
a language run charts against tokens seen and shows its generated text. One dashboard and one Chromium
serve the file: a server start costs seconds of CPU on a machine the whole suite shares."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from chromium import (LOSS_POINTS_JS, PACED_RUNS, browser_window, choose, dashboard_browser, new_run_dir,
                      start_a_long_mlp_run, take)

pytestmark = [pytest.mark.timeout(600), pytest.mark.browser]

WAIT_MS = 90_000  # per condition: a loaded 2-core machine starts workers, trains and redraws slowly
VIEWPORT = {"width": 1400, "height": 1000}
REFRESHES = 3  # live refreshes, each bringing new points, that the view must survive

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
# Per chart, by its title: the x axis title and each trace's name and x values, as plotly.js holds them.
CHARTS_JS = """() => Object.fromEntries([...document.querySelectorAll('.js-plotly-plot')]
    .filter(plot => plot._fullLayout && plot._fullData)
    .map(plot => [plot._fullLayout.title.text, {
        x_title: plot._fullLayout.xaxis.title.text,
        y_title: plot._fullLayout.yaxis.title.text,
        traces: plot._fullData.map(trace => ({name: trace.name, x: Array.from(trace.x || [])})),
    }]))"""


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[Path, str, Browser]]:
    """The file's dashboard (worker processes, as in the product; runs paced, see PACED_RUNS) and Chromium."""
    runs = tmp_path_factory.mktemp("browser_live") / "runs"
    with dashboard_browser(runs, env=PACED_RUNS) as (url, browser):
        yield runs, url, browser


# --- a run followed live in two tabs, its zoom and hidden legend entries kept ---------------------------


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


def keeps_zoom_and_hidden_legend_entries(page: Page) -> None:
    """A drag-zoom of the loss chart keeps its ranges, and a legend entry clicked off stays off (the zoom
    too), while points keep arriving."""
    zoomed = drag_zoom(page)
    full = page.evaluate(f"() => ({LOSS_POINTS_JS})()")
    assert zoomed["x"][1] - zoomed["x"][0] < full, f"not zoomed in: {zoomed} over {full} points"
    survive_refreshes(page, zoomed, "the zoom")

    page.locator(".js-plotly-plot").first.locator(".legend .traces .legendtoggle").first.click()
    page.wait_for_function(f"() => ({VIEW_JS})().visible.every(v => v === 'legendonly')", timeout=WAIT_MS)
    hidden = page.evaluate(VIEW_JS)
    assert hidden["x"] == zoomed["x"] and hidden["y"] == zoomed["y"]
    survive_refreshes(page, hidden, "the hidden legend entry (or the zoom)")


def test_a_run_started_in_one_tab_is_followed_live_in_another_and_its_charts_keep_the_users_view(served):
    """A tab opened before the run (never touched) follows, live, the run another tab starts, and its Stop
    works; when the run ends, both tabs say so. Meanwhile, in the tab that started it, a drag-zoom and a
    legend entry clicked off survive the live refreshes. One long mlp run serves both checks."""
    _, url, browser = served
    before = set(served[0].iterdir())
    with browser_window(browser, viewport=VIEWPORT) as context:
        watcher, starter = context.new_page(), context.new_page()
        watcher.goto(f"{url}/Train")  # opened first, while nothing runs
        expect(watcher.get_by_text("No run yet")).to_be_visible(timeout=WAIT_MS)
        expect(watcher.locator(".st-key-stop button")).to_be_disabled()

        start_a_long_mlp_run(starter, url, WAIT_MS)

        # The watcher, never touched, picks the run up: its progress, its charts filling, its Stop.
        expect(watcher.get_by_text("— running: step").first).to_be_visible(timeout=WAIT_MS)
        watcher.wait_for_function(f"() => ({LOSS_POINTS_JS})() >= 3", timeout=WAIT_MS)
        first = watcher.evaluate(LOSS_POINTS_JS)
        watcher.wait_for_function(f"() => ({LOSS_POINTS_JS})() > {first}", timeout=WAIT_MS)  # still live
        stop = watcher.locator(".st-key-stop button")
        expect(stop).to_be_enabled(timeout=WAIT_MS)

        expect(starter.get_by_text("mlp b=32 k=4").first).to_be_visible(timeout=WAIT_MS)  # the run's progress bar
        starter.wait_for_function(f"() => ({LOSS_POINTS_JS})() >= 5", timeout=WAIT_MS)
        keeps_zoom_and_hidden_legend_entries(starter)

        stop.click()
        for page in (watcher, starter):
            expect(page.get_by_text("— stopped: step").first).to_be_visible(timeout=WAIT_MS)
            expect(page.locator(".st-key-stop button")).to_be_disabled(timeout=WAIT_MS)
        expect(starter.locator(".st-key-start button")).to_be_enabled(timeout=WAIT_MS)

        # Deleted on the Runs page in the other tab: the starter, not touched, drops it at its next refresh.
        run_id = new_run_dir(served[0], before).name
        watcher.goto(f"{url}/Runs?run={run_id}")
        # Each click until the page shows it taken (a click lost while the page redrew, under load: seen with -n 4).
        sure, delete = watcher.get_by_text(f"Yes, delete {run_id} and all their files"), \
            watcher.get_by_role("button", name="Delete 1 run")
        take(watcher, lambda: watcher.get_by_text("Delete the 1 selected run").click(),
             lambda ms: expect(sure).to_be_visible(timeout=ms), wait_ms=WAIT_MS)
        take(watcher, sure.click, lambda ms: expect(delete).to_be_enabled(timeout=ms), wait_ms=WAIT_MS)
        take(watcher, delete.click, lambda ms: expect(watcher.get_by_text(f"Deleted {run_id}.")).to_be_visible(
            timeout=ms), wait_ms=WAIT_MS)
        expect(starter.get_by_text(f"Run {run_id} was deleted")).to_be_visible(timeout=WAIT_MS)
        expect(starter.get_by_text("— stopped: step")).to_have_count(0)
        expect(starter.locator(".js-plotly-plot")).to_have_count(0)


# --- a language run ----------------------------------------------------------------------------------


def type_number(page: Page, label: str, value: int) -> None:
    box = page.get_by_role("spinbutton", name=label)
    box.fill(str(value))
    box.press("Enter")
    expect(box).to_have_value(str(value))


@pytest.mark.timeout(300)
def test_a_gpt_run_in_the_browser_charts_against_tokens_and_shows_generated_text(served):
    """Pick gpt on pydoc with small settings, start, watch the loss chart fill and the generated text
    appear, then switch the charts' x axis to tokens seen and read what plotly.js drew."""
    runs, url, browser = served
    before = set(runs.iterdir())
    with browser_window(browser, viewport=VIEWPORT) as context:
        page = context.new_page()
        page.goto(f"{url}/Train")
        choose(page, "Model", "gpt")
        sidebar = page.get_by_test_id("stSidebarUserContent")
        expect(sidebar.get_by_text("Pick pydoc (bundled) or text")).to_be_visible(timeout=WAIT_MS)  # under Dataset
        choose(page, "Dataset", "pydoc")
        expect(page.get_by_text("gpt tiny: 0.13 M parameters")).to_be_visible(timeout=WAIT_MS)
        # An evaluation runs over all 981 validation sequences (~5 s on a loaded 2-core machine): one, at the end.
        for label, value in (("Sequence length (tokens)", 32), ("Micro-batch size b", 16), ("Accumulation steps k", 2),
                             ("Max optimizer steps (0 = no limit)", 6), ("Evaluate every N steps (0 = each epoch)", 6)):
            type_number(page, label, value)
        start = page.locator(".st-key-start button")
        expect(start).to_be_enabled(timeout=30_000)
        start.click()

        page.wait_for_function(f"() => ({LOSS_POINTS_JS})() > 0", timeout=WAIT_MS)
        sample = page.locator("code").filter(has_text="step 6: The ")
        expect(sample.first).to_be_visible(timeout=WAIT_MS)  # the latest sample, under the charts
        expect(page.get_by_text("finished: step 6 of 6")).to_be_visible(timeout=WAIT_MS)
        # The charts redraw after the run ends (a rerun): read them in the same look that finds the throughput chart
        # drawn again (a look, then a read, raced a later redraw once in CI).
        charts = page.wait_for_function(f"() => {{ const charts = ({CHARTS_JS})(); "
                                        "return 'throughput' in charts ? charts : null; }", timeout=WAIT_MS).json_value()
        assert charts["throughput"]["y_title"] == "tokens/s"
        assert "validation perplexity" in charts
        assert charts["training loss"]["x_title"] == "optimizer step"

        # A click the page lost (it was redrawn as it was clicked, under load in CI) is clicked again once it is idle.
        take(page, page.get_by_text("tokens seen", exact=True).click,
             lambda ms: expect(page.get_by_role("radio", name="tokens seen")).to_be_checked(timeout=ms), wait_ms=WAIT_MS)
        # Each chart is redrawn in its turn: wait for all of them (reading after the first was a race).
        charts = page.wait_for_function(f"""() => {{ const charts = ({CHARTS_JS})();
            return ['training loss', 'throughput', 'validation perplexity'].every(
                name => charts[name]?.x_title === 'tokens seen') ? charts : null; }}""", timeout=WAIT_MS).json_value()
    run_dir = new_run_dir(runs, before)  # Start made one run
    with open(run_dir / "metrics.csv", newline="") as file:
        tokens_seen = [int(row["tokens_seen"]) for row in csv.DictReader(file)]
    assert len(tokens_seen) == 6 and tokens_seen == sorted(tokens_seen) and tokens_seen[0] > 0
    smoothed = charts["training loss"]["traces"][1]
    assert smoothed["x"] == tokens_seen, smoothed
    assert charts["validation perplexity"]["traces"][0]["x"] == [tokens_seen[5]]
    assert charts["throughput"]["x_title"] == "tokens seen"

"""The real dashboard in Debian's Chromium: type a micro-batch size, start a tiny run, watch
the loss chart fill, let the run finish, download its CSV and check the header; run the lab pages; type
a tiny plan, read both plan charts as plotly.js drew them, and carry the recommendation to the Train page;
start a sharded run (N=2, fsdp) by clicks and read its collectives and memory charts."""

import csv
import json
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psutil
import pytest
from playwright.sync_api import Browser, Page, expect

from chromium import LOSS_POINTS_JS, browser_window, dashboard_browser, loss_points, new_run_dir
from dashboard.nav import PAGES
from gaccum_core.train.metrics import STEP_COLUMNS

pytestmark = [pytest.mark.timeout(600), pytest.mark.browser]
WAIT_MS = 90_000  # per condition: a loaded 2-core machine measures slowly
# Per chart: [name, meta, points] of each trace plotly.js drew (meta says what it is: see plan_charts).
TRACES_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
    .map(plot => (plot._fullData || []).map(t => [t.name, t.meta, t._length]))"""


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[Path, str, Browser]]:
    """One dashboard (worker processes, as in the product) and one Chromium for this file's tests: a server
    start costs seconds of CPU on a machine the whole suite shares."""
    runs = tmp_path_factory.mktemp("browser") / "runs"
    # The plan and the lab pages compute in the server's own process: one torch thread, as in the rest of the
    # suite (on a shared 2-core machine a second one only contends: measured 28 s for the plan with two, 21 s with one).
    with dashboard_browser(runs, env={"OMP_NUM_THREADS": "1"}) as (url, browser):
        yield runs, url, browser


@contextmanager
def dashboard_page(served: tuple[Path, str, Browser], width: int = 1400,
                   height: int = 1000) -> Iterator[tuple[str, Page]]:
    """A fresh page (its own Streamlit session) on the file's dashboard, closed after the test."""
    _, url, browser = served
    with browser_window(browser, viewport={"width": width, "height": height}, accept_downloads=True) as window:
        yield url, window.new_page()


def test_the_home_page_its_sidebar_and_what_it_loads_for_the_train_page(served):
    """The sidebar says Home (not 'app') and lists the pages; no Deploy button; the device line fills in
    once the server has loaded torch; the browser has imported the Train page's widget code meanwhile."""
    titles = [re.compile(f"{entry.title}$") for entry in PAGES]
    assert [t.pattern for t in titles[:3]] == ["Home$", "Train$", "Runs$"]
    with dashboard_page(served) as (url, page):
        page.set_viewport_size({"width": 1280, "height": 900})
        # The server's first page, opened by its link: a folder named pages/ beside app.py made Streamlit run
        # it as an old-style app (an "app" entry above Home, no icons) until st.navigation had run once.
        page.goto(f"{url}/Equivalence")
        nav = page.locator('[data-testid="stSidebarNav"] a')
        expect(nav).to_have_text(titles, timeout=WAIT_MS)  # each title after its icon's name
        page.goto(url)
        expect(page.get_by_text("CPU — runs train on the CPU")).to_be_visible(timeout=WAIT_MS)
        expect(nav).to_have_text(titles)
        expect(page.get_by_test_id("stAppDeployButton")).to_have_count(0)
        loaded = page.evaluate("() => performance.getEntriesByType('resource').map(e => e.name)")
        assert any("/static/js/Selectbox." in name for name in loaded), "the Train page's widgets were not prefetched"


def test_a_tiny_run_from_the_browser(served):
    runs = served[0]
    before = set(runs.iterdir())
    with dashboard_page(served) as (url, page):
        page.goto(f"{url}/Train")
        b = page.get_by_role("spinbutton", name="Micro-batch size b")
        expect(b).to_have_value("32", timeout=60_000)
        b.fill("16")  # typed exactly; the effective batch follows
        b.press("Enter")
        expect(page.get_by_test_id("stMetricValue").first).to_have_text("64", timeout=60_000)
        steps = page.get_by_role("spinbutton", name="Max optimizer steps (0 = no limit)")
        steps.fill("12")
        steps.press("Enter")
        start = page.locator(".st-key-start button")
        expect(start).to_be_enabled(timeout=30_000)
        page.wait_for_function("() => !!window.Plotly", timeout=60_000)  # preloaded before any chart exists
        start.click()
        page.wait_for_function(f"() => ({LOSS_POINTS_JS})() > 0", timeout=60_000)
        assert loss_points(page) > 0
        expect(page.get_by_text("finished: step 12 of 12")).to_be_visible(timeout=120_000)
        button = page.get_by_role("button", name="Download the latest run's metrics.csv")
        with page.expect_download(timeout=30_000) as info:
            button.click()
        lines = info.value.path().read_text().splitlines()
        assert lines[0] == ",".join(STEP_COLUMNS)
        assert len(lines) == 13
        run_dir = new_run_dir(runs, before)
        trainer = json.loads((run_dir / "status.json").read_text())["pid"]  # trained in a worker process
        servers = [p.pid for p in psutil.process_iter(["cmdline"]) if "streamlit" in " ".join(p.info["cmdline"] or [])]
        assert servers and trainer not in servers
    assert '"micro_batch_size": 16' in (run_dir / "config.json").read_text()



def test_the_lab_pages_in_the_browser(served):
    with dashboard_page(served) as (url, page):
        page.goto(f"{url}/Equivalence")
        page.locator(".st-key-eq_run button").click()
        expect(page.get_by_text("equal up to float rounding")).to_be_visible(timeout=120_000)
        expect(page.locator(".js-plotly-plot")).to_have_count(3, timeout=60_000)
        with page.expect_download(timeout=30_000) as info:
            page.get_by_role("button", name="Download the side-by-side training (CSV)").click()
        assert info.value.path().read_text().splitlines()[0] == "step,loss_big,loss_accum,weight_distance"

        page.goto(f"{url}/Pitfalls")
        page.locator(".st-key-pitfalls_run button").click()
        expect(page.locator(".js-plotly-plot")).to_have_count(9, timeout=240_000)
        with page.expect_download(timeout=30_000) as info:
            page.get_by_role("button", name="Download all pitfall results (CSV)").click()
        header = info.value.path().read_text().splitlines()[0].split(",")
        assert {"step", "distance_pitfall", "distance_correct", "pitfall"} <= set(header)


def test_a_tiny_plan_in_the_browser_and_its_settings_on_the_train_page(served):
    """Type a tiny plan, press Plan, read both charts as plotly.js drew them, and carry the recommendation
    to the Train page with "Use these settings"."""
    with dashboard_page(served) as (url, page):
        page.goto(f"{url}/Plan")
        for label, value in (("Image size (0 = the data set's own)", "16"), ("Fake samples", "64"),
                             ("Effective batch E", "24"), ("Memory budget (MB)", "0.5")):
            box = page.get_by_role("spinbutton", name=label)
            expect(box).to_be_visible(timeout=WAIT_MS)
            box.fill(value)
            box.press("Enter")
            expect(box).to_have_value(re.compile(rf"^{re.escape(value)}0*$"))  # the budget shows as 0.50
            # One value at a time, as a person types: a value entered while the previous one's rerun still ran
            # was once lost under load (the plan ran at the default 32 MB budget; see the session note).
            page.wait_for_timeout(300)
            expect(page.get_by_test_id("stStatusWidgetRunningIcon")).to_have_count(0, timeout=WAIT_MS)
        clearing = page.locator(".st-key-plan_clear_cache")
        clearing.get_by_role("button", name="Remove per optimizer step").click()
        expect(clearing.get_by_text("per optimizer step")).to_have_count(0)
        # Plan only once the server has the choice (a click during the rerun it started once planned both).
        expect(page.get_by_text(re.compile(r"^Plan crosses 2 option combinations: fp32, bf16:"))).to_be_visible(
            timeout=WAIT_MS)

        plan = page.locator(".st-key-plan_run button")
        expect(plan).to_be_enabled(timeout=WAIT_MS)
        plan.click()
        expect(page.get_by_text(re.compile(r"^step \d+ of about \d+"))).to_be_visible(timeout=WAIT_MS)
        # Memory and speed against b, and speed against memory by lever (activation checkpointing).
        expect(page.locator(".js-plotly-plot")).to_have_count(3, timeout=WAIT_MS)
        page.wait_for_function(f"() => ({TRACES_JS})().every(traces => traces.length > 0)", timeout=WAIT_MS)
        memory, speed, tradeoff = page.evaluate(TRACES_JS)
        assert [name for name, meta, _ in tradeoff if meta == "lever"] == ["checkpointing off"]
        assert [name for name, meta, _ in memory if meta == "option"] == ["fp32", "bf16"], memory
        assert [[name, n] for name, meta, n in memory if meta in ("budget", "margin")] == [
            ["budget 0.5 MB", 2], ["budget less 10% margin (0.45 MB)", 2]], memory
        assert all(n >= 3 for _, meta, n in memory if meta == "option"), memory  # the sizes around the budget
        assert [name for name, meta, n in speed if meta == "option" and n >= 2] == ["fp32", "bf16"], speed  # 2 timed
        (star,) = [name for name, meta, n in speed if meta == "recommended" and n == 1]

        success = page.get_by_test_id("stAlertContentSuccess")
        expect(success).to_contain_text("Recommended: micro-batch size b=")
        b, k = re.search(r"b=(\d+), accumulation steps k=(\d+)", success.inner_text()).groups()
        assert star.endswith(f" b={b}") and int(b) * int(k) == 24
        page.get_by_role("button", name="Use these settings").click()
        expect(page).to_have_url(re.compile(r"/Train(\?.*)?$"), timeout=WAIT_MS)  # the settings kept in the URL
        expect(page.get_by_role("spinbutton", name="Micro-batch size b")).to_have_value(b, timeout=WAIT_MS)
        expect(page.get_by_role("spinbutton", name="Accumulation steps k")).to_have_value(k, timeout=WAIT_MS)
        expect(page.get_by_test_id("stMetricValue").first).to_have_text("24", timeout=WAIT_MS)


# --- a sharded run: N=2, sharding fsdp, sync on the window's last micro-batch, started by clicks --------------

FSDP_WAIT_MS = 240_000  # a loaded 2-core machine starts torchrun's two ranks slowly
FSDP_STEPS = 3
# Per chart title: each trace's uid, name, whether it is in the legend, and its y values, from plotly.js's _fullData.
DRAWN_JS = """(title) => {
    const plot = [...document.querySelectorAll('.js-plotly-plot')]
        .find(p => p._fullLayout && p._fullLayout.title.text === title);
    return plot ? plot._fullData.map(t => ({uid: t.uid, name: t.name, legend: t.showlegend,
                                             y: Array.from(t.y || []).map(Number)})) : null;
}"""


def _set(page: Page, label: str, value: str) -> None:
    box = page.get_by_role("spinbutton", name=label)
    box.fill(value)
    box.press("Enter")
    expect(box).to_have_value(value)


@pytest.mark.multiprocess
def test_an_fsdp_run_started_from_the_train_page_charts_its_collectives_and_memory_per_rank(served):
    """The collectives chart plotly.js draws holds the counts the run wrote to its metrics.csv, and the memory
    chart says it is per rank."""
    runs = served[0]
    before = set(runs.iterdir())
    with dashboard_page(served, width=1280, height=2400) as (url, page):
        page.goto(f"{url}/Train")
        model = page.get_by_role("combobox", name="Model")
        expect(model).to_be_visible(timeout=FSDP_WAIT_MS)
        model.click()
        page.get_by_role("option", name="mlp", exact=True).click()
        _set(page, "Micro-batch size b", "8")
        _set(page, "Processes N (data-parallel)", "2")
        _set(page, "Max optimizer steps (0 = no limit)", str(FSDP_STEPS))
        page.get_by_text("fsdp", exact=True).click()
        page.get_by_text("last micro-batch only", exact=True).click()
        expect(page.get_by_text("times fewer collectives")).to_be_visible(timeout=FSDP_WAIT_MS)
        start = page.locator(".st-key-start button")
        expect(start).to_be_enabled(timeout=FSDP_WAIT_MS)
        start.click()
        expect(page.get_by_text(f"finished: step {FSDP_STEPS} of {FSDP_STEPS}")).to_be_visible(timeout=FSDP_WAIT_MS)
        page.wait_for_function(f"() => ({DRAWN_JS})('collectives per optimizer step') !== null", timeout=FSDP_WAIT_MS)
        collectives = page.evaluate(DRAWN_JS, "collectives per optimizer step")
        memory_title = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')]
            .map(p => p._fullLayout.title.text).filter(t => t.startsWith('training memory'))""")
    with open(new_run_dir(runs, before) / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == FSDP_STEPS
    lines = {trace["uid"].rsplit("--", 1)[1]: trace for trace in collectives if "--" in trace["uid"]}
    # What the chart draws is what the run counted, kind by kind; an fsdp run all-reduces nothing.
    for kind in ("reduce_scatter", "all_gather"):
        wrote = [float(row[f"{kind}_calls"]) for row in rows]
        assert min(wrote) > 0 and lines[kind]["y"] == wrote, (kind, lines[kind]["y"], wrote)
    assert "allreduce" not in lines
    assert lines["legend"]["name"].endswith("N=2 fsdp/last") and lines["legend"]["legend"]
    # sync on the window's last micro-batch only: fewer reduce-scatters than all-gathers (one per micro-batch)
    assert lines["all_gather"]["y"][0] > lines["reduce_scatter"]["y"][0]
    assert memory_title == ["training memory per rank"]

"""The real dashboard in Debian's Chromium: type a micro-batch size, start a tiny run, watch
the loss chart fill, let the run finish, download its CSV and check the header."""

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psutil
import pytest
from playwright.sync_api import Browser, Page, expect

from chromium import LOSS_POINTS_JS, dashboard_browser, loss_points
from gaccum_core.train.metrics import STEP_COLUMNS

pytestmark = [pytest.mark.timeout(600), pytest.mark.browser]


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[Path, str, Browser]]:
    """One dashboard (worker processes, as in the product) and one Chromium for this file's tests: a server
    start costs seconds of CPU on a machine the whole suite shares."""
    runs = tmp_path_factory.mktemp("browser") / "runs"
    with dashboard_browser(runs) as (url, browser):
        yield runs, url, browser


@contextmanager
def dashboard_page(served: tuple[Path, str, Browser]) -> Iterator[tuple[str, Page]]:
    """A fresh page (its own Streamlit session) on the file's dashboard."""
    _, url, browser = served
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    try:
        yield url, page
    finally:
        page.close()


def test_a_tiny_run_from_the_browser(served):
    runs = served[0]
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
        (run_dir,) = runs.iterdir()
        trainer = json.loads((run_dir / "status.json").read_text())["pid"]  # trained in a worker process
        servers = [p.pid for p in psutil.process_iter(["cmdline"]) if "streamlit" in " ".join(p.info["cmdline"] or [])]
        assert servers and trainer not in servers
    (run_dir,) = runs.iterdir()
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

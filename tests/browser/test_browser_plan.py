"""The Plan page in Debian's Chromium: type a tiny plan, press Plan, read both charts as plotly.js drew
them, and carry the recommendation to the Train page with "Use these settings"."""

import re
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from chromium import CHROMIUM, CHROMIUM_ARGS, dashboard

pytestmark = [pytest.mark.timeout(600), pytest.mark.browser]
WAIT_MS = 90_000  # per condition: a loaded 2-core machine measures slowly
# Per chart: [name, meta, points] of each trace plotly.js drew (meta says what it is: see plan_charts).
TRACES_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
    .map(plot => (plot._fullData || []).map(t => [t.name, t.meta, t._length]))"""


def test_a_tiny_plan_in_the_browser_and_its_settings_on_the_train_page(tmp_path: Path):
    assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: apt-get install -y chromium"
    runs = tmp_path / "runs"
    runs.mkdir()
    # The plan measures in the server's own process: one torch thread, as in the rest of the suite (on a
    # shared 2-core machine a second one only contends: measured 28 s for this test with two, 21 s with one).
    with dashboard(runs, env={"OMP_NUM_THREADS": "1"}) as url, sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/Plan")
        for label, value in (("Image size (0 = the data set's own)", "16"), ("Fake samples", "64"),
                             ("Effective batch E", "24"), ("Memory budget (MB)", "0.5")):
            box = page.get_by_role("spinbutton", name=label)
            expect(box).to_be_visible(timeout=WAIT_MS)
            box.fill(value)
            box.press("Enter")
            expect(box).to_have_value(re.compile(rf"^{re.escape(value)}0*$"))  # the budget shows as 0.50
        clearing = page.locator(".st-key-plan_clear_cache")
        clearing.get_by_role("button", name="Remove per optimizer step").click()
        expect(clearing.get_by_text("per optimizer step")).to_have_count(0)
        # Plan only once the server has the choice (a click during the rerun it started once planned both).
        expect(page.get_by_text(re.compile(r"^Plan crosses 2 option combinations: fp32, bf16;"))).to_be_visible(
            timeout=WAIT_MS)

        plan = page.locator(".st-key-plan_run button")
        expect(plan).to_be_enabled(timeout=WAIT_MS)
        plan.click()
        expect(page.get_by_text(re.compile(r"^measured \d+ of at most \d+ candidates"))).to_be_visible(timeout=WAIT_MS)
        expect(page.locator(".js-plotly-plot")).to_have_count(2, timeout=WAIT_MS)
        page.wait_for_function(f"() => ({TRACES_JS})().every(traces => traces.length > 0)", timeout=WAIT_MS)
        memory, speed = page.evaluate(TRACES_JS)
        assert [name for name, meta, _ in memory if meta == "option"] == ["fp32", "bf16"], memory
        assert [[name, n] for name, meta, n in memory if meta in ("budget", "margin")] == [
            ["budget 0.5 MB", 2], ["budget less 10% margin (0.45 MB)", 2]], memory
        assert all(n >= 4 for _, meta, n in memory if meta == "option"), memory  # b = 1 2 4 8 at least
        assert [name for name, meta, n in speed if meta == "option" and n >= 4] == ["fp32", "bf16"], speed
        (star,) = [name for name, meta, n in speed if meta == "recommended" and n == 1]

        success = page.get_by_test_id("stAlertContentSuccess")
        expect(success).to_contain_text("Recommended: micro-batch size b=")
        b, k = re.search(r"b=(\d+), accumulation steps k=(\d+)", success.inner_text()).groups()
        assert star.endswith(f" b={b}") and int(b) * int(k) == 24
        page.get_by_role("button", name="Use these settings").click()
        expect(page).to_have_url(re.compile(r"/Train$"), timeout=WAIT_MS)
        expect(page.get_by_role("spinbutton", name="Micro-batch size b")).to_have_value(b, timeout=WAIT_MS)
        expect(page.get_by_role("spinbutton", name="Accumulation steps k")).to_have_value(k, timeout=WAIT_MS)
        expect(page.get_by_test_id("stMetricValue").first).to_have_text("24", timeout=WAIT_MS)
        browser.close()

"""Every open tab follows the device's runs: a run started in one tab shows, live, in another that
was opened before it, whose Stop then works; when the run ends, both tabs say so."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from chromium import LOSS_POINTS_JS, dashboard_browser, start_a_long_mlp_run

pytestmark = [pytest.mark.timeout(600), pytest.mark.browser]
WAIT_MS = 90_000  # per condition: a loaded 2-core machine trains and redraws slowly


def test_a_run_started_in_one_tab_is_followed_live_in_another(tmp_path: Path):
    with dashboard_browser(tmp_path / "runs") as (url, browser):
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
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
        stop.click()
        for page in (watcher, starter):
            expect(page.get_by_text("— stopped: step").first).to_be_visible(timeout=WAIT_MS)
            expect(page.locator(".st-key-stop button")).to_be_disabled(timeout=WAIT_MS)
        expect(starter.locator(".st-key-start button")).to_be_enabled(timeout=WAIT_MS)

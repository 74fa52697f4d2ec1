"""Issue 33 item 7 in Chromium: selecting a row of the Runs table moves nothing above it. The progress bar of a
selected run this server trained (how it ended) used to appear above the table and push it 51 px down, so the
next click landed on the header's "select all"."""

import pytest
from playwright.sync_api import expect

from chromium import dashboard_browser, take

pytestmark = [pytest.mark.timeout(600), pytest.mark.browser]
WAIT_MS = 90_000  # per condition: a loaded 2-core machine measures slowly
ROW_PX = 35  # the height of the table's header and of each row (Streamlit's data grid)


def test_selecting_a_row_moves_nothing_above_the_table(tmp_path):
    with dashboard_browser(tmp_path / "runs", executor="thread") as (url, browser):
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(f"{url}/Train?model=mlp&max_steps=2")
        start = page.locator(".st-key-start button")
        expect(start).to_be_enabled(timeout=WAIT_MS)
        start.click()
        finished = page.get_by_test_id("stProgress").filter(has_text="finished: step 2 of 2")
        expect(finished).to_be_visible(timeout=WAIT_MS)

        page.get_by_role("link", name="Runs").click()  # the same session: this server trained the run
        table = page.get_by_test_id("stDataFrame").first  # the runs table; the selected runs' settings below it
        expect(table).to_be_visible(timeout=WAIT_MS)
        expect(page.get_by_text("Click rows of the table")).to_be_visible(timeout=WAIT_MS)
        expect(table.get_by_test_id("data-grid-canvas")).to_be_visible(timeout=WAIT_MS)
        page.wait_for_timeout(2000)  # the grid takes clicks once it has drawn its rows
        before = table.bounding_box()
        _select_first_row(page, before)
        expect(page.get_by_test_id("stProgress").filter(has_text="finished: step 2 of 2")).to_be_visible(
            timeout=WAIT_MS)  # what appears on selecting: the run's progress, how it ended
        page.wait_for_timeout(1000)
        after = table.bounding_box()
        assert abs(after["y"] - before["y"]) <= 1, (before, after)
        assert abs(after["height"] - before["height"]) <= 1, (before, after)


def _select_first_row(page, box) -> None:
    """Click the first row's checkbox until the page says it is selected. A click the grid lost (a loaded machine:
    its canvas not yet taking clicks; seen once in CI, the page idle, nothing selected) is clicked again once the
    page is idle; a click taken is waited for, never clicked twice (that would clear it)."""
    selected = page.get_by_text("Delete the 1 selected run")
    take(page, lambda: page.mouse.click(box["x"] + 20, box["y"] + ROW_PX * 1.5),
         lambda ms: expect(selected).to_be_visible(timeout=ms), wait_ms=WAIT_MS)

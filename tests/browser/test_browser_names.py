"""Issue 29 G in Chromium: a run's name reads exactly as typed wherever the pages draw it (the progress line, the
overlay picker's options and chips, the caption of coinciding runs) and is never a link, whatever it holds."""

import json
import shutil

import pytest
from playwright.sync_api import Locator, expect

from chromium import dashboard_browser

pytestmark = [pytest.mark.timeout(600), pytest.mark.browser]
WAIT_MS = 90_000  # per condition: a loaded 2-core machine measures slowly
URL_NAME = "see http://2130706433:8501/x"
OTHER_NAMES = ["**B** [lnk](http://evil.example)", "www.evil.com :smile: a@b.co -> x"]
LINKS = 'a[href*="2130706433"], a[href*="evil"], a[href*="b.co"]'


def _reads(element: Locator, text: str) -> None:
    """The element's text holds `text` as typed, and the element holds no link."""
    expect(element).to_contain_text(text, timeout=WAIT_MS)
    assert element.locator("a").count() == 0, element.inner_html()


def test_names_read_as_typed_and_are_never_links(tmp_path):
    runs = tmp_path / "runs"
    with dashboard_browser(runs, executor="thread") as (url, browser):
        page = browser.new_page(viewport={"width": 1280, "height": 2000})
        page.goto(f"{url}/Train?model=mlp&max_steps=2")  # the settings a link carries
        name = page.get_by_placeholder("e.g. baseline, fp16 try 2")
        name.fill(URL_NAME)
        name.press("Enter")
        start = page.locator(".st-key-start button")
        expect(start).to_be_enabled(timeout=WAIT_MS)
        start.click()
        bar = page.get_by_test_id("stProgress").filter(has_text="finished: step 2 of 2")
        _reads(bar, f"· {URL_NAME} — finished: step 2 of 2")

        # Two copies of the run under other names, overlaid: they coincide, and a caption names them.
        (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]  # the run; beside it the runs index
        for i, other in enumerate(OTHER_NAMES):
            copy = shutil.copytree(run_dir, runs / f"{run_dir.name}-{i}")
            status = json.loads((copy / "status.json").read_text())
            (copy / "status.json").write_text(json.dumps({**status, "name": other}))
        page.reload()
        picker = page.get_by_role("combobox", name="Other runs to overlay")
        expect(picker).to_be_visible(timeout=WAIT_MS)
        for other in OTHER_NAMES:
            picker.click()
            option = page.get_by_role("option").filter(has_text=other)
            _reads(option, other)
            option.click()
            _reads(page.locator(".st-key-chart_overlay"), other)  # its chip
        page.keyboard.press("Escape")  # the picker's list closes
        caption = page.get_by_test_id("stCaptionContainer").filter(has_text="coincide")
        for other in OTHER_NAMES:
            _reads(caption, other)
        assert page.locator(LINKS).count() == 0, [a.get_attribute("href") for a in page.locator(LINKS).all()]

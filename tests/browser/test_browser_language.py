"""A language run in the real dashboard (Debian's Chromium, runs in worker processes): pick gpt on
pydoc with small settings, start, watch the loss chart fill and the generated text appear, then switch
the charts' x axis to tokens seen and read what plotly.js drew."""

import csv
from pathlib import Path

import pytest
from playwright.sync_api import expect

from chromium import LOSS_POINTS_JS, dashboard_browser

pytestmark = [pytest.mark.timeout(300), pytest.mark.browser]

WAIT_MS = 90_000  # per condition: a loaded 2-core machine starts workers and trains slowly
# Per chart, by its title: the x axis title and each trace's name and x values, as plotly.js holds them.
CHARTS_JS = """() => Object.fromEntries([...document.querySelectorAll('.js-plotly-plot')]
    .filter(plot => plot._fullLayout && plot._fullData)
    .map(plot => [plot._fullLayout.title.text, {
        x_title: plot._fullLayout.xaxis.title.text,
        y_title: plot._fullLayout.yaxis.title.text,
        traces: plot._fullData.map(trace => ({name: trace.name, x: Array.from(trace.x || [])})),
    }]))"""


def choose(page, label: str, option: str) -> None:
    box = page.get_by_role("combobox", name=label)
    expect(box).to_be_visible(timeout=WAIT_MS)
    box.click()
    page.get_by_role("option", name=option, exact=True).click()


def type_number(page, label: str, value: int) -> None:
    box = page.get_by_role("spinbutton", name=label)
    box.fill(str(value))
    box.press("Enter")
    expect(box).to_have_value(str(value))


def test_a_gpt_run_in_the_browser_charts_against_tokens_and_shows_generated_text(tmp_path: Path):
    runs = tmp_path / "runs"
    with dashboard_browser(runs) as (url, browser):
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
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
        charts = page.evaluate(CHARTS_JS)
        assert charts["throughput"]["y_title"] == "tokens/s"
        assert "validation perplexity" in charts
        assert charts["training loss"]["x_title"] == "optimizer step"

        page.get_by_text("tokens seen", exact=True).click()
        # Each chart is redrawn in its turn: wait for all of them (reading after the first was a race).
        page.wait_for_function(f"""() => {{ const charts = ({CHARTS_JS})();
            return ['training loss', 'throughput', 'validation perplexity'].every(
                name => charts[name]?.x_title === 'tokens seen'); }}""", timeout=WAIT_MS)
        charts = page.evaluate(CHARTS_JS)
        (run_dir,) = runs.iterdir()
        with open(run_dir / "metrics.csv", newline="") as file:
            tokens_seen = [int(row["tokens_seen"]) for row in csv.DictReader(file)]
        assert len(tokens_seen) == 6 and tokens_seen == sorted(tokens_seen) and tokens_seen[0] > 0
        smoothed = charts["training loss"]["traces"][1]
        assert smoothed["x"] == tokens_seen, smoothed
        assert charts["validation perplexity"]["traces"][0]["x"] == [tokens_seen[5]]
        assert charts["throughput"]["x_title"] == "tokens seen"

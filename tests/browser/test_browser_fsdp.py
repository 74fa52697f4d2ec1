"""A sharded run from the Train page in Debian's Chromium: N=2, sharding fsdp, sync on the window's last
micro-batch, started by clicks; the collectives chart plotly.js draws holds the counts the run wrote to its
metrics.csv, and the memory chart says it is per rank."""

from __future__ import annotations

import csv

import pytest
from playwright.sync_api import expect

from chromium import dashboard_browser

pytestmark = [pytest.mark.timeout(600), pytest.mark.browser, pytest.mark.multiprocess]

WAIT_MS = 240_000  # a loaded 2-core machine starts torchrun's two ranks slowly
STEPS = 3
# Per chart title: each trace's uid, name, whether it is in the legend, and its y values, from plotly.js's _fullData.
DRAWN_JS = """(title) => {
    const plot = [...document.querySelectorAll('.js-plotly-plot')]
        .find(p => p._fullLayout && p._fullLayout.title.text === title);
    return plot ? plot._fullData.map(t => ({uid: t.uid, name: t.name, legend: t.showlegend,
                                             y: Array.from(t.y || []).map(Number)})) : null;
}"""


def _set(page, label: str, value: str) -> None:
    box = page.get_by_role("spinbutton", name=label)
    box.fill(value)
    box.press("Enter")
    expect(box).to_have_value(value)


def test_an_fsdp_run_started_from_the_train_page_charts_its_collectives_and_memory_per_rank(tmp_path):
    runs = tmp_path / "runs"
    with dashboard_browser(runs) as (url, browser):
        page = browser.new_page(viewport={"width": 1280, "height": 2400})
        page.goto(f"{url}/Train")
        model = page.get_by_role("combobox", name="Model")
        expect(model).to_be_visible(timeout=WAIT_MS)
        model.click()
        page.get_by_role("option", name="mlp", exact=True).click()
        _set(page, "Micro-batch size b", "8")
        _set(page, "Processes N (data-parallel)", "2")
        _set(page, "Max optimizer steps (0 = no limit)", str(STEPS))
        page.get_by_text("fsdp", exact=True).click()
        page.get_by_text("last micro-batch only", exact=True).click()
        expect(page.get_by_text("times fewer collectives")).to_be_visible(timeout=WAIT_MS)
        start = page.locator(".st-key-start button")
        expect(start).to_be_enabled(timeout=WAIT_MS)
        start.click()
        expect(page.get_by_text(f"finished: step {STEPS} of {STEPS}")).to_be_visible(timeout=WAIT_MS)
        page.wait_for_function(f"() => ({DRAWN_JS})('collectives per optimizer step') !== null", timeout=WAIT_MS)
        collectives = page.evaluate(DRAWN_JS, "collectives per optimizer step")
        memory_title = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')]
            .map(p => p._fullLayout.title.text).filter(t => t.startsWith('training memory'))""")
        page.close()
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]  # beside it the runs index
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == STEPS
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

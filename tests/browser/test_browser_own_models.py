"""Your own Hugging Face model in the real dashboard (Debian's Chromium): type hf:DIR under "your own…",
see where its weights come from, train it on a text file from the Train page and read the loss chart as
plotly.js drew it. The run trains in the server's threads: a worker process would import torch and
transformers again (~12 s of this test on a loaded machine), which test_browser_live.py covers."""

import csv
from pathlib import Path

import pytest
from playwright.sync_api import expect

from chromium import dashboard_browser
from hfmodels import saved_model

pytestmark = [pytest.mark.timeout(300), pytest.mark.browser]

WAIT_MS = 90_000  # per condition: a loaded 2-core machine imports transformers and trains slowly
# The loss chart's traces (raw, then smoothed), as plotly.js holds them after drawing.
LOSS_JS = """() => { const plot = [...document.querySelectorAll('.js-plotly-plot')]
    .find(p => p._fullLayout && p._fullLayout.title.text === 'training loss');
    return plot ? plot._fullData.map(t => ({name: t.name, x: Array.from(t.x || []), y: Array.from(t.y || [])})) : null; }"""


def fill(page, label: str, value: str) -> None:
    box = page.get_by_label(label, exact=True)
    expect(box).to_be_visible(timeout=WAIT_MS)
    box.fill(value)
    box.press("Enter")
    expect(box).to_have_value(value, timeout=WAIT_MS)


def choose(page, label: str, option: str) -> None:
    box = page.get_by_role("combobox", name=label)
    expect(box).to_be_visible(timeout=WAIT_MS)
    box.click()
    page.get_by_role("option", name=option, exact=True).click()


def test_an_hf_model_typed_in_trains_from_the_train_page_and_charts_its_loss(tmp_path: Path, tmp_path_factory):
    model = saved_model(tmp_path_factory, "llama")
    notes = tmp_path / "notes.txt"
    notes.write_text("\n\n".join(f"Paragraph {i} says " + "accumulate every token " * (1 + i % 5)
                                 for i in range(20)), encoding="utf-8")
    runs = tmp_path / "runs"
    with dashboard_browser(runs, executor="thread") as (url, browser):
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/Train")
        choose(page, "Model", "your own…")
        fill(page, "Your model", f"hf:{model}")
        sidebar = page.get_by_test_id("stSidebarUserContent")
        expect(sidebar.get_by_text("Weights from model.safetensors")).to_be_visible(timeout=WAIT_MS)
        choose(page, "Dataset", "text")
        fill(page, "Text file", str(notes))
        # b=2, k=4 (the default): windows of 8 of the 18 training sequences; one evaluation, at the end.
        for label, value in (("Micro-batch size b", 2), ("Max optimizer steps (0 = no limit)", 2),
                             ("Evaluate every N steps (0 = each epoch)", 2)):
            fill(page, label, str(value))
        expect(sidebar.get_by_text("GPT size")).to_have_count(0)  # gpt's size is no setting of an hf: model
        start = page.locator(".st-key-start button")
        expect(start).to_be_enabled(timeout=WAIT_MS)
        start.click()

        expect(page.get_by_text("finished: step 2 of 2")).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("code").filter(has_text="step 2: ").first).to_be_visible(timeout=WAIT_MS)
        page.wait_for_function(f"() => {{ const t = ({LOSS_JS})(); return t && t[0].y.length === 2; }}",
                               timeout=WAIT_MS)
        raw = page.evaluate(LOSS_JS)[0]
        (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]  # beside it the runs index
        with open(run_dir / "metrics.csv", newline="") as file:
            rows = list(csv.DictReader(file))
        assert raw["x"] == [1, 2] and raw["y"] == pytest.approx([float(row["loss"]) for row in rows])
        assert f"hf:{model.name}" in raw["name"], raw["name"]

"""The pages in Debian's Chromium on one dashboard that trains in its threads (a worker process would import
torch, and for an hf: model transformers, again: test_browser_live.py covers the workers), shared by the file's
tests: a server start costs seconds of CPU on a machine the whole suite shares. Each test opens its own window
(its own Streamlit sessions), reads only the runs it made, and lets its runs finish (no run left stopped: a new
Train tab would offer it).

- Issue 33 item 7: selecting a row of the Runs table moves nothing above it. The progress bar of a selected run
  this server trained (how it ended) used to appear above the table and push it 51 px down, so the next click
  landed on the header's "select all".
- Issue 29 G: a run's name reads exactly as typed wherever the pages draw it (the progress line, the overlay
  picker's options and chips, the caption of coinciding runs) and is never a link, whatever it holds.
- Issue 33 item 6: the chips of the runs picked to overlay (Train page) or compare (Runs page) show each run's
  label whole. The multiselect kept them on one row scrolled sideways, the first ones out of view.
- Your own Hugging Face model: type hf:DIR under "your own…", see where its weights come from, train it on a
  text file from the Train page and read the loss chart as plotly.js drew it."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Iterator

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from chromium import browser_window, choose, dashboard_browser, new_run_dir, take
from gaccum_core.config import RunConfig
from gaccum_core.execution.runner import Runner
from hfmodels import saved_model

pytestmark = [pytest.mark.timeout(600), pytest.mark.browser]
WAIT_MS = 90_000  # per condition: a loaded 2-core machine measures, imports transformers and trains slowly
ROW_PX = 35  # the height of the runs table's header and of each row (Streamlit's data grid)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[Path, str, Browser]]:
    """The file's dashboard (training in its threads) and Chromium."""
    runs = tmp_path_factory.mktemp("browser_thread_server") / "runs"
    with dashboard_browser(runs, executor="thread") as (url, browser):
        yield runs, url, browser


# --- issue 33 item 7: the runs table stays still --------------------------------------------------------------


def test_selecting_a_row_moves_nothing_above_the_table(served):
    _, url, browser = served
    with browser_window(browser, viewport={"width": 1280, "height": 1000}) as window:
        page = window.new_page()
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


def _select_first_row(page: Page, box: dict) -> None:
    """Click the first row's checkbox until the page says it is selected. A click the grid lost (a loaded machine:
    its canvas not yet taking clicks; seen once in CI, the page idle, nothing selected) is clicked again once the
    page is idle; a click taken is waited for, never clicked twice (that would clear it)."""
    selected = page.get_by_text("Delete the 1 selected run")
    take(page, lambda: page.mouse.click(box["x"] + 20, box["y"] + ROW_PX * 1.5),
         lambda ms: expect(selected).to_be_visible(timeout=ms), wait_ms=WAIT_MS)


# --- issue 29 G: names read as typed, never links ----------------------------------------------------------------

URL_NAME = "see http://2130706433:8501/x"
OTHER_NAMES = ["**B** [lnk](http://evil.example)", "www.evil.com :smile: a@b.co -> x"]
LINKS = 'a[href*="2130706433"], a[href*="evil"], a[href*="b.co"]'


def _reads(element: Locator, text: str) -> None:
    """The element's text holds `text` as typed, and the element holds no link."""
    expect(element).to_contain_text(text, timeout=WAIT_MS)
    assert element.locator("a").count() == 0, element.inner_html()


def test_names_read_as_typed_and_are_never_links(served):
    runs, url, browser = served
    made_before = set(runs.iterdir())
    with browser_window(browser, viewport={"width": 1280, "height": 2000}) as window:
        page = window.new_page()
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
        run_dir = new_run_dir(runs, made_before)
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


# --- issue 33 item 6: chips show each label whole ---------------------------------------------------------------

NAMES = [f"a name long enough to tell this run from the others, number {i}" for i in range(4)]
# Each chip's place in its box of chips (px from the box's left and right edges) and whether its text is whole.
CHIPS_JS = """(key) => [...document.querySelectorAll(`.st-key-${key} [data-tag]`)].map(chip => {
    const box = chip.closest('[data-testid=stMultiSelectTagsContainer]').getBoundingClientRect();
    const own = chip.getBoundingClientRect(), text = chip.querySelector('span');
    return {left: own.left - box.left, right: box.right - own.right, whole: text.scrollWidth <= text.clientWidth,
            text: text.textContent};
})"""


def _whole_and_in_view(page: Page, key: str, count: int) -> None:
    expect(page.locator(f".st-key-{key} [data-tag]")).to_have_count(count, timeout=WAIT_MS)
    page.wait_for_timeout(500)
    chips = page.evaluate(CHIPS_JS, key)
    for chip in chips:
        assert chip["left"] >= 0 and chip["right"] >= 0 and chip["whole"], chips


def _pick(page: Page, picker: Locator, name: str) -> None:
    """Pick the run named name in the overlay list until its chip shows. A pick the page lost (seen once in CI: a
    rerun redrew the list as the option was clicked, the page then idle without its chip) is picked again once the
    page is idle; a pick taken is waited for, never picked twice."""
    chip = page.locator(".st-key-chart_overlay [data-tag]").filter(has_text=name)

    def pick() -> None:
        # Under load a rerun can keep the list redrawing past Playwright's 30 s default (seen once beside a busy
        # suite): wait for it as long as for anything else on this page.
        picker.click(timeout=WAIT_MS)
        page.get_by_role("option").filter(has_text=name).click(timeout=WAIT_MS)
        page.keyboard.press("Escape")

    take(page, pick, lambda ms: expect(chip).to_have_count(1, timeout=ms), wait_ms=WAIT_MS)


def test_the_chips_of_picked_runs_show_every_label_whole(served, tmp_path):
    runs, url, browser = served
    trained = Runner(tmp_path / "trained", executor="thread")
    run_id = trained.submit(RunConfig(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2, max_steps=2))
    assert trained.wait(run_id, timeout=120).state == "finished"
    ids = []
    for i, name in enumerate(NAMES):
        copy = shutil.copytree(tmp_path / "trained" / run_id, runs / f"{run_id}-{i}")
        status = json.loads((copy / "status.json").read_text())
        (copy / "status.json").write_text(json.dumps({**status, "name": name}))
        ids.append(copy.name)
    with browser_window(browser, viewport={"width": 1280, "height": 1200}) as window:
        page = window.new_page()
        page.goto(f"{url}/Train")
        picker = page.get_by_role("combobox", name="Other runs to overlay")
        expect(picker).to_be_visible(timeout=WAIT_MS)
        for name in NAMES:
            _pick(page, picker, name)
        _whole_and_in_view(page, "chart_overlay", len(NAMES))

        page.goto(f"{url}/Runs?run={','.join(ids)}")
        expect(page.get_by_text(f"Delete the {len(ids)} selected runs")).to_be_visible(timeout=WAIT_MS)
        _whole_and_in_view(page, "runs_selected", len(ids))


# --- your own Hugging Face model -----------------------------------------------------------------------------

# The loss chart's traces (raw, then smoothed), as plotly.js holds them after drawing.
LOSS_JS = """() => { const plot = [...document.querySelectorAll('.js-plotly-plot')]
    .find(p => p._fullLayout && p._fullLayout.title.text === 'training loss');
    return plot ? plot._fullData.map(t => ({name: t.name, x: Array.from(t.x || []), y: Array.from(t.y || [])})) : null; }"""


def fill(page: Page, label: str, value: str) -> None:
    box = page.get_by_label(label, exact=True)
    expect(box).to_be_visible(timeout=WAIT_MS)
    box.fill(value)
    box.press("Enter")
    expect(box).to_have_value(value, timeout=WAIT_MS)


@pytest.mark.timeout(300)
def test_an_hf_model_typed_in_trains_from_the_train_page_and_charts_its_loss(served, tmp_path, tmp_path_factory):
    runs, url, browser = served
    made_before = set(runs.iterdir())
    model = saved_model(tmp_path_factory, "llama")
    notes = tmp_path / "notes.txt"
    notes.write_text("\n\n".join(f"Paragraph {i} says " + "accumulate every token " * (1 + i % 5)
                                 for i in range(20)), encoding="utf-8")
    with browser_window(browser, viewport={"width": 1400, "height": 1000}) as window:
        page = window.new_page()
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
        with open(new_run_dir(runs, made_before) / "metrics.csv", newline="") as file:
            rows = list(csv.DictReader(file))
        assert raw["x"] == [1, 2] and raw["y"] == pytest.approx([float(row["loss"]) for row in rows])
        assert f"hf:{model.name}" in raw["name"], raw["name"]

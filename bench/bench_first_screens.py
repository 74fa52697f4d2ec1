"""What a person waits for on a cold dashboard: the home page, the Train page, Start → first point.

Each repeat starts a fresh `streamlit run app.py` (its own runs directory) and a fresh Chromium page,
and times, in this order, as a user would meet them:

  home     from the moment the server answers its health check, opening the home page until it is
           drawn: the title, the page links and the runs section ("Latest runs") are visible and the
           script run is over (Streamlit's status widget gone);
  train    after --read-s seconds on the home page (a user reading it), clicking "Train" in the
           sidebar until the Train page is usable: its Start button enabled;
  first    after --read-s seconds on the Train page, pressing Start with the default settings until
           plotly.js has drawn the loss chart's first point;
  ddp      with "Processes N" set to 2 (two torchrun processes on the CPU, gloo) and --read-s seconds
           later (the page warms a torchrun job meanwhile), pressing Start until the first point.

Prints every repeat and the medians against the targets of issue 21 (home ≤ 2 s, train ≤ 1.5 s,
first ≤ 1.5 s, ddp ≤ 6 s) and the default run's length (steps, seconds, first and last loss). No
figure is asserted.

    python bench/bench_first_screens.py [--repeats 5] [--read-s 2] [--no-ddp]

--read-s 0 is the no-reading-pause mode: each click comes the moment the page allows it (Train clicked as the
home page is drawn, Start pressed as soon as it is enabled), the case of issue 33: on a cold server the
spare worker is then still warming up, and Start stays disabled until it is warm.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from chromium import CHROMIUM, CHROMIUM_ARGS, dashboard  # noqa: E402

TARGETS = {"home": 2.0, "train": 1.5, "first": 1.5, "ddp": 6.0}
IDLE_JS = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"


def _idle(page) -> None:
    """Wait until the page's script run is over (Streamlit hides its status widget)."""
    page.wait_for_function(IDLE_JS, timeout=120_000, polling=20)


def home_seconds(page, url: str) -> float:
    """Open the home page; seconds until its title, links and runs section are drawn and the run is over."""
    began = time.perf_counter()
    page.goto(url)
    expect(page.get_by_role("heading", name="Latest runs")).to_be_visible(timeout=120_000)
    expect(page.get_by_role("link", name="Train: configure and watch a run")).to_be_visible(timeout=120_000)
    _idle(page)
    return time.perf_counter() - began


def train_seconds(page) -> float:
    """Click Train in the sidebar; seconds until Start is enabled."""
    began = time.perf_counter()
    page.locator('[data-testid="stSidebarNav"] a', has_text="Train").first.click()
    expect(page.locator(".st-key-start button")).to_be_enabled(timeout=120_000)
    return time.perf_counter() - began


# The names of the loss chart's traces that have points (a run's legend text; plotly.py drops uids).
RUNS_DRAWN_JS = """() => {
    const plot = document.querySelector('.js-plotly-plot');
    if (!plot || !plot.calcdata || !plot._fullData) return [];
    return plot._fullData.filter((trace, i) => plot.calcdata[i] && plot.calcdata[i].length > 0
                                               && !isNaN(plot.calcdata[i][0].y)).map(t => t.name);
}"""


def first_point_seconds(page) -> float:
    """Press Start; seconds until the loss chart has a point of a trace it did not draw before."""
    before = page.evaluate(RUNS_DRAWN_JS)
    began = time.perf_counter()
    page.locator(".st-key-start button").click()
    page.wait_for_function(f"(before) => ({RUNS_DRAWN_JS})().some(r => !before.includes(r))", arg=before,
                           timeout=120_000, polling=20)
    return time.perf_counter() - began


def wait_finished(page) -> None:
    """Wait for the run on the page to end (Start enabled again, Stop disabled)."""
    expect(page.locator(".st-key-stop button")).to_be_disabled(timeout=300_000)
    expect(page.locator(".st-key-start button")).to_be_enabled(timeout=60_000)


def set_processes(page, n: int) -> None:
    """Type n into 'Processes N' and wait until the page has taken it."""
    box = page.get_by_role("spinbutton", name="Processes N (data-parallel)")
    box.fill(str(n))
    box.press("Enter")
    expect(box).to_have_value(str(n))
    _idle(page)


def default_run(runs: Path) -> str:
    """The default run's length from its metrics.csv: steps, seconds, first and last loss."""
    (metrics,) = sorted(runs.glob("*/metrics.csv"))[:1]
    rows = list(csv.DictReader(metrics.open()))
    seconds = float(rows[-1]["wall_time_s"]) if rows and rows[-1].get("wall_time_s") else float("nan")
    return (f"{len(rows)} steps in {seconds:.1f} s, loss {float(rows[0]['loss']):.2f} → "
            f"{float(rows[-1]['loss']):.2f}") if rows else "no rows"


def repeat_once(browser, root: Path, repeat: int, read_s: float, ddp: bool) -> dict[str, float]:
    """One fresh server and page: every figure of one repeat (a stage that times out is said, with a
    screenshot, and ends the repeat)."""
    runs = root / f"runs{repeat}"
    runs.mkdir()
    figures: dict[str, float] = {}
    with dashboard(runs) as url:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        stage = "home"
        try:
            figures["home"] = home_seconds(page, url)
            page.wait_for_timeout(read_s * 1000)
            stage = "train"
            figures["train"] = train_seconds(page)
            _idle(page)
            page.wait_for_timeout(read_s * 1000)
            stage = "first"
            figures["first"] = first_point_seconds(page)
            wait_finished(page)
            if repeat == 0:
                print(f"  default run: {default_run(runs)}", flush=True)
            if ddp:
                stage = "ddp"
                set_processes(page, 2)
                page.wait_for_timeout(read_s * 1000)
                figures["ddp"] = first_point_seconds(page)
                wait_finished(page)
        except PlaywrightTimeoutError as exc:
            shot = root.parent / f"bench-first-screens-{repeat}-{stage}.png"
            page.screenshot(path=str(shot))
            print(f"  repeat {repeat + 1}: {stage} timed out ({str(exc).splitlines()[0]}); screenshot {shot}")
        page.close()
    return figures


def main() -> None:
    """Measure every repeat, print each and the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--read-s", type=float, default=2.0, help="seconds a user spends reading each page")
    parser.add_argument("--no-ddp", action="store_true", help="skip the 2-process run")
    args = parser.parse_args()
    results: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for repeat in range(args.repeats):
            results.append(repeat_once(browser, Path(tmp), repeat, args.read_s, not args.no_ddp))
            print(f"repeat {repeat + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in results[-1].items()), flush=True)
        browser.close()
    print(f"medians over {len(results)} fresh servers (1280×1000 Chromium, {args.read_s:g} s read per page):")
    for name, target in TARGETS.items():
        values = [r[name] for r in results if name in r]
        if values:
            print(f"  {name:6s} {statistics.median(values):6.2f} s (min {min(values):.2f}, max {max(values):.2f}; "
                  f"target ≤ {target:g} s)")
    totals = [r["home"] + r["train"] + r["first"] for r in results if {"home", "train", "first"} <= r.keys()]
    if totals and args.read_s == 0:  # no pause: the server's first page to the first point, all of it waited for
        print(f"  total  {statistics.median(totals):6.2f} s (home + train + first; min {min(totals):.2f}, "
              f"max {max(totals):.2f})")


if __name__ == "__main__":
    main()

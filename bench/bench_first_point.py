"""Time from pressing Start to the first plotted loss point, in the real dashboard on the CPU.

Starts `streamlit run app.py` on a free loopback port, opens the Train page in Debian's Chromium
with the default settings, waits --settle-s seconds on the loaded page (a user reading it; with the
process executor the warm spare worker imports torch meanwhile), presses Start and waits until
plotly.js has drawn a loss point; the clock runs from the click to that point. Repeats with a fresh
server and runs directory each time and prints every time and the median (target: under 3 s).
--executor picks where the server trains (GACCUM_EXECUTOR: a worker process, the default, or a
thread of the server).

    python bench/bench_first_point.py [--repeats 5] [--executor process|thread] [--settle-s 8]
        [--screenshot docs/train.png]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from chromium import CHROMIUM, CHROMIUM_ARGS, LOSS_POINTS_JS, dashboard  # noqa: E402


def first_point_seconds(page, url: str, settle_s: float = 8.0) -> float:
    """Open the Train page, wait settle_s, press Start, return the seconds until the loss chart has a point."""
    page.goto(f"{url}/Train")
    start = page.locator(".st-key-start button")
    expect(start).to_be_enabled(timeout=120_000)
    page.wait_for_timeout(settle_s * 1000)  # the clock measures the run, not the page load
    began = time.perf_counter()
    start.click()
    page.wait_for_function(f"() => ({LOSS_POINTS_JS})() > 0", timeout=60_000, polling=20)
    return time.perf_counter() - began


def _screenshot(page, path: Path) -> None:
    """After the default run, a second run with fp16 and more epochs, overlaid; then a PNG mid-run."""
    expect(page.get_by_text("finished: step")).to_be_visible(timeout=120_000)
    page.get_by_role("radiogroup", name="Mixed precision").get_by_text("fp16").click()
    epochs = page.get_by_role("spinbutton", name="Epochs")
    epochs.fill("40")
    epochs.press("Enter")
    page.wait_for_timeout(1500)
    page.locator(".st-key-start button").click()
    page.wait_for_timeout(15_000)  # a few hundred steps of curves
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def main() -> None:
    """Measure, print, and optionally save a screenshot of the Train page during a run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--executor", choices=("process", "thread"), default="process",
                        help="where the server trains runs (GACCUM_EXECUTOR)")
    parser.add_argument("--settle-s", type=float, default=8.0,
                        help="seconds on the loaded Train page before pressing Start: a user reading the page; "
                             "the warm spare worker imports torch meanwhile")
    parser.add_argument("--screenshot", type=Path, help="save a PNG of the Train page mid-run here")
    args = parser.parse_args()
    times = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for repeat in range(args.repeats):
            runs = Path(tmp) / f"runs{repeat}"
            runs.mkdir()
            with dashboard(runs, env={"GACCUM_EXECUTOR": args.executor}) as url:
                page = browser.new_page(viewport={"width": 1500, "height": 1400})
                times.append(first_point_seconds(page, url, args.settle_s))
                print(f"repeat {repeat + 1}: {times[-1]:.2f} s from Start to the first loss point", flush=True)
                if args.screenshot and repeat == args.repeats - 1:
                    _screenshot(page, args.screenshot)
                stop = page.locator(".st-key-stop button")
                if stop.is_enabled():
                    try:  # the default run is short: it may end, disabling Stop, before the click lands
                        stop.click(timeout=5_000)
                    except PlaywrightTimeoutError:
                        pass
                page.close()
        browser.close()
    print(f"median {statistics.median(times):.2f} s over {len(times)} repeats "
          f"(min {min(times):.2f}, max {max(times):.2f}; target < 3 s; default settings, CPU; "
          f"executor {args.executor}, Start pressed {args.settle_s:g} s after the page loaded)")


if __name__ == "__main__":
    main()

"""Does watching a run in the browser slow the training? And how fast does the page answer a click?

Issue "The UI must not slow the training". One `streamlit run app.py` (tests/browser.py's dashboard())
runs pinned to core 0 with `taskset -c 0`; Debian's Chromium, its Playwright driver and this script
run pinned to core 1. Every run is started by pressing Start on the Train page; with --executor
thread it trains in the server's own runner thread, next to the sessions that draw it, and with
--executor process (the product's default) in a worker process, which inherits the server's core 0.

(a) Training speed. Runs of one config (same seed) alternate between
      no tab:   a tab configures the run, presses Start, and is closed as soon as the run directory
                exists; the run goes on in the server with no session watching it;
      two tabs: the tab that pressed Start and a second tab opened on the Train page before it stay
                open, visible and live (the page's live() fragment redraws every second) to the end.
    Each pair is one run of each, in alternating order (ABBA...) so that drift on this noisy machine
    does not favour one side. A run's speed is read from its metrics.csv: samples trained after the
    first optimizer step over the wall time they took (evaluations included, as in any run); the
    median of the per-step samples_per_s is printed too. The ratio two tabs / no tab is per pair;
    the summary quotes the median over pairs. A short warm-up run comes first and is not counted.
(b) Click latency. In extra two-tab runs (not those of (a), whose speed clicks would disturb), the
    tab that started the run switches the "x axis" radio between "optimizer step" and "samples
    seen", spread over the run. Latency is the time from the click event in the page to the loss
    chart's plotly state (`_fullLayout.xaxis.title.text`) showing the new axis, both read in the page
    (performance.now(), polled at every animation frame). Only clicks whose rerun began and ended
    while the run was running count. The same clicks are then timed with both tabs open and no run
    going (idle).

Prints every run, every click and a summary; no figure is asserted.

    python bench/bench_ui_load.py [--executor process|thread] [--pairs 4] [--clicks 10] [--model cnn] [--epochs 20]
                                  [--image-size 32] [--micro-batch-size 32] [--accum-steps 4] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import psutil
from playwright.sync_api import Browser, Page, expect, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from chromium import CHROMIUM, CHROMIUM_ARGS, LOSS_POINTS_JS, dashboard  # noqa: E402
from ui_load_runs import (FINAL_STATES, RunSpeed, Setup, check_config, run_dirs, run_speed, run_state, wait_done,  # noqa: E402
                          wait_new_run, wait_running)

SERVER_CORE, BROWSER_CORE = 0, 1
WAIT_MS = 120_000  # per page condition: a loaded 2-core machine draws slowly
X_LABELS = ("optimizer step", "samples seen")  # gaccum_core.views.axes.X_AXES, as the radio shows them

# The first plotly graph of the page is the loss chart (also inside open shadow roots, should the
# chart become a custom component).
_PLOT_JS = """(() => {
    const find = (root) => {
        const hit = root.querySelector('.js-plotly-plot');
        if (hit) return hit;
        for (const el of root.querySelectorAll('*')) {
            if (el.shadowRoot) { const inner = find(el.shadowRoot); if (inner) return inner; }
        }
        return null;
    };
    return find(document);
})()"""
X_TITLE_JS = f"""() => {{
    const plot = {_PLOT_JS};
    return plot && plot._fullLayout && plot._fullLayout.xaxis ? plot._fullLayout.xaxis.title.text : null;
}}"""
# Remembers when the next click reaches the page (capture phase: before Streamlit sees it).
ARM_CLICK_JS = """() => {
    window.__benchClick = null;
    window.__benchSeen = null;
    document.addEventListener('click', () => { window.__benchClick = performance.now(); },
                              {capture: true, once: true});
}"""
SEEN_JS = f"""(target) => {{
    if (({X_TITLE_JS})() !== target) return false;
    window.__benchSeen = performance.now();
    return true;
}}"""


# ---------------------------------------------------------------- processes and pinning


def chromium_on_core(tmp: Path, core: int) -> Path:
    """A wrapper script that execs Chromium pinned to `core`, for Playwright's executable_path."""
    wrapper = tmp / "chromium-pinned"
    wrapper.write_text(f'#!/bin/sh\nexec taskset -c {core} {CHROMIUM} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def pinning_report() -> str:
    """The cores each kind of process descending from this one may run on, read from the OS."""
    cores: dict[str, set[str]] = {"this script": {str(sorted(os.sched_getaffinity(0)))}}
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
            kind = "streamlit" if "streamlit" in cmdline else "chromium" if "chrom" in cmdline else "driver"
            cores.setdefault(kind, set()).add(str(sorted(child.cpu_affinity())))
        except psutil.Error:  # gone meanwhile
            continue
    return "; ".join(f"{kind} on cores {' '.join(sorted(sets))}" for kind, sets in cores.items())


# ---------------------------------------------------------------- the Train page


def open_train(browser: Browser, url: str) -> Page:
    """A new tab (its own Streamlit session) on the Train page, once its Start button is drawn."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/Train")
    expect(page.locator(".st-key-start button")).to_be_visible(timeout=WAIT_MS)
    return page


def configure(page: Page, setup: Setup) -> None:
    """Type `setup` into the Train page's controls and wait until Start accepts it."""
    model = page.get_by_role("combobox", name="Model")
    expect(model).to_be_visible(timeout=WAIT_MS)
    model.click()
    page.get_by_role("option", name=setup.model, exact=True).click()
    for label, value in setup.spinbuttons():
        box = page.get_by_role("spinbutton", name=label, exact=True)
        box.fill(str(value))
        box.press("Enter")
        expect(box).to_have_value(str(value), timeout=WAIT_MS)
    page.wait_for_timeout(500)  # the last Enter's rerun (and its preflight) lands before Start
    expect(page.locator(".st-key-start button")).to_be_enabled(timeout=WAIT_MS)


def press_start(page: Page, runs: Path) -> str:
    """Press Start; the new run's id, once the server has created its directory."""
    before = run_dirs(runs)
    page.locator(".st-key-start button").click()
    return wait_new_run(runs, before)


def loss_points(page: Page) -> int:
    """Points on the tab's loss chart (0 when it shows no chart)."""
    return page.evaluate(f"() => ({LOSS_POINTS_JS})()")


def visibility(page: Page) -> str:
    """document.visibilityState of the tab: a hidden tab would not be watching."""
    return page.evaluate("() => document.visibilityState")


# ---------------------------------------------------------------- (a) runs with and without tabs


def run_no_tab(browser: Browser, url: str, runs: Path, setup: Setup) -> RunSpeed:
    """Start a run from a tab, close the tab at once, let the run finish in the server alone."""
    page = open_train(browser, url)
    configure(page, setup)
    run_id = press_start(page, runs)
    page.goto("about:blank")  # leaves the session: Streamlit drops it when the socket closes
    page.close()
    return finish(runs / run_id, setup)


def run_two_tabs(browser: Browser, url: str, runs: Path, setup: Setup) -> tuple[RunSpeed, str]:
    """Start a run from one tab with a second tab already watching; both stay open to the end.
    Also returns how live each tab was: the most loss points it drew, its visibility."""
    watcher = open_train(browser, url)
    starter = open_train(browser, url)
    configure(starter, setup)
    run_id = press_start(starter, runs)
    seen = watch(runs / run_id, (starter, watcher))
    speed = finish(runs / run_id, setup)
    for page in (starter, watcher):
        page.close()
    return speed, seen


def watch(run_dir: Path, pages: tuple[Page, ...]) -> str:
    """Until the run ends: every 2 s, the loss points each tab draws (light: one evaluate per tab)."""
    points = [0] * len(pages)
    states = {visibility(page) for page in pages}
    while run_state(run_dir) not in FINAL_STATES:
        for i, page in enumerate(pages):
            points[i] = max(points[i], loss_points(page))
        time.sleep(2.0)
    return (f"the tabs drew up to {'/'.join(map(str, points))} loss points while it ran; "
            f"visibility {'/'.join(sorted(states))}")


def finish(run_dir: Path, setup: Setup) -> RunSpeed:
    """Wait for the run to end, check it trained `setup` to the end, and time it."""
    state = wait_done(run_dir)
    if state != "finished":
        raise RuntimeError(f"run {run_dir.name} ended {state}: see {run_dir}/status.json")
    check_config(run_dir, setup)
    return run_speed(run_dir)


def show(label: str, speed: RunSpeed, extra: str = "") -> None:
    """Print one run."""
    print(f"  {label:8s} {speed.run_id}: {speed.steps} steps in {speed.duration_s:5.1f} s, "
          f"{speed.samples_per_s:7.1f} samples/s (median step {speed.median_step_samples_per_s:7.1f}) {extra}",
          flush=True)


def measure_pairs(browser: Browser, url: str, runs: Path, setup: Setup, pairs: int) -> list[tuple[RunSpeed, RunSpeed]]:
    """`pairs` pairs of (no tab, two tabs) runs, their order alternating; prints each as it ends."""
    results = []
    for pair in range(pairs):
        print(f"pair {pair + 1}/{pairs}", flush=True)
        order = ("none", "two") if pair % 2 == 0 else ("two", "none")
        speeds: dict[str, RunSpeed] = {}
        for kind in order:
            if kind == "none":
                speeds[kind] = run_no_tab(browser, url, runs, setup)
                show("no tab", speeds[kind])
            else:
                speeds[kind], seen = run_two_tabs(browser, url, runs, setup)
                show("two tabs", speeds[kind], f"[{seen}]")
        ratio = speeds["two"].samples_per_s / speeds["none"].samples_per_s
        step_ratio = speeds["two"].median_step_samples_per_s / speeds["none"].median_step_samples_per_s
        print(f"  ratio two tabs / no tab: {ratio:.3f} (median step samples/s: {step_ratio:.3f})", flush=True)
        results.append((speeds["none"], speeds["two"]))
    return results


# ---------------------------------------------------------------- (b) click latency


def wait_chart(page: Page) -> None:
    """Until the tab shows a loss chart (not between two draws of it)."""
    page.wait_for_function(f"() => ({X_TITLE_JS})() !== null", timeout=WAIT_MS)


def click_x_axis(page: Page) -> tuple[float, str]:
    """Switch the x axis radio to the other axis; ms from the click reaching the page to the loss
    chart showing that axis, and the axis switched to."""
    wait_chart(page)
    current = page.evaluate(X_TITLE_JS)
    if current not in X_LABELS:
        raise RuntimeError(f"the loss chart's x axis is titled {current!r}, not one of {X_LABELS}")
    target = X_LABELS[1 - X_LABELS.index(current)]
    page.evaluate(ARM_CLICK_JS)
    page.get_by_role("radiogroup", name="x axis").get_by_text(target, exact=True).click()
    page.wait_for_function(SEEN_JS, arg=target, polling="raf", timeout=WAIT_MS)
    clicked, seen = page.evaluate("() => [window.__benchClick, window.__benchSeen]")
    if clicked is None:
        raise RuntimeError("the click never reached the page")
    return seen - clicked, target


def clicks_during_run(browser: Browser, url: str, runs: Path, setup: Setup, wanted: int,
                      spacing_s: float) -> tuple[list[float], Page, Page]:
    """One two-tab run; from its first chart on, a click in the starting tab every `spacing_s` (or at
    once when a slow answer ran past that) while it runs. The latencies of clicks begun and answered
    while the run was running, and the two tabs (left open)."""
    watcher = open_train(browser, url)
    starter = open_train(browser, url)
    configure(starter, setup)
    run_dir = runs / press_start(starter, runs)
    wait_running(run_dir)
    latencies: list[float] = []
    next_at = time.monotonic()
    while len(latencies) < wanted and run_state(run_dir) == "running":
        time.sleep(max(0.0, next_at - time.monotonic()))
        next_at = time.monotonic() + spacing_s
        wait_chart(starter)
        before = run_state(run_dir)
        ms, target = click_x_axis(starter)
        during = before == "running" and run_state(run_dir) == "running"
        print(f"  click -> {target!r}: {ms:6.0f} ms{'' if during else ' (run ended meanwhile: not counted)'}",
              flush=True)
        if during:
            latencies.append(ms)
    finish(run_dir, setup)
    return latencies, starter, watcher


def measure_busy_clicks(browser: Browser, url: str, runs: Path, setup: Setup, wanted: int,
                        run_s: float, max_runs: int = 5) -> tuple[list[float], Page, Page]:
    """At least `wanted` click latencies during two-tab runs (more runs if one ends too soon, at most
    `max_runs`); the tabs of the last run stay open for the idle clicks."""
    spacing = max(1.0, 0.8 * run_s / wanted)
    latencies: list[float] = []
    for attempt in range(1, max_runs + 1):
        print(f"click run {attempt} (a click every ~{spacing:.1f} s while it runs)", flush=True)
        got, starter, watcher = clicks_during_run(browser, url, runs, setup, wanted - len(latencies), spacing)
        latencies += got
        if len(latencies) >= wanted or attempt == max_runs:
            return latencies, starter, watcher
        starter.close()
        watcher.close()
    raise AssertionError("unreachable")


def measure_idle_clicks(page: Page, wanted: int) -> list[float]:
    """Click latencies with no run going, in the tab whose finished run is still charted."""
    page.wait_for_timeout(2000)  # the page's rerun at the run's end is over
    latencies = []
    for _ in range(wanted):
        ms, target = click_x_axis(page)
        print(f"  idle click -> {target!r}: {ms:6.0f} ms", flush=True)
        latencies.append(ms)
        page.wait_for_timeout(1000)
    return latencies


# ---------------------------------------------------------------- report


def spread(values: list[float], fmt: str = ".3f") -> str:
    """median (min, max, n)."""
    if not values:
        return "none measured"
    return (f"{statistics.median(values):{fmt}} (min {min(values):{fmt}}, max {max(values):{fmt}}, "
            f"n={len(values)})")


def summary(pairs: list[tuple[RunSpeed, RunSpeed]], busy: list[float], idle: list[float], setup: Setup,
            pinning: str) -> None:
    """The final block."""
    ratios = [two.samples_per_s / none.samples_per_s for none, two in pairs]
    step_ratios = [two.median_step_samples_per_s / none.median_step_samples_per_s for none, two in pairs]
    durations = [s.duration_s for pair in pairs for s in pair]
    print("\n==== summary ====")
    print(f"training samples/s, two live tabs / no tab, median over pairs: {spread(ratios)}")
    print(f"  per pair: {', '.join(f'{r:.3f}' for r in ratios)}")
    print(f"  same with the median per-step samples/s: {spread(step_ratios)}")
    print(f"click latency (x axis radio -> loss chart redrawn), during a run, ms: {spread(busy, '.0f')}")
    print(f"click latency, idle (no run, same two tabs open), ms: {spread(idle, '.0f')}")
    print(f"config: {setup.describe()}; runs took {min(durations):.1f}-{max(durations):.1f} s")
    print(f"pinning: server `taskset -c {SERVER_CORE}`, Chromium `taskset -c {BROWSER_CORE}`; measured: {pinning}")


def parse_args() -> argparse.Namespace:
    """Command line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executor", choices=("process", "thread"), default="process",
                        help="where the server trains runs (GACCUM_EXECUTOR)")
    parser.add_argument("--pairs", type=int, default=4, help="(no tab, two tabs) run pairs")
    parser.add_argument("--clicks", type=int, default=10, help="clicks timed during runs, and again idle")
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--micro-batch-size", type=int, default=32)
    parser.add_argument("--accum-steps", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main() -> None:
    """Pin, start the server and Chromium, measure (a) then (b), print the summary."""
    args = parse_args()
    if not {SERVER_CORE, BROWSER_CORE} <= os.sched_getaffinity(0):
        sys.exit(f"needs cores {SERVER_CORE} and {BROWSER_CORE}; this process may use {os.sched_getaffinity(0)}")
    setup = Setup(args.model, args.epochs, args.image_size, args.micro_batch_size, args.accum_steps, args.seed)
    os.sched_setaffinity(0, {BROWSER_CORE})  # this script and the Playwright driver stay off the server's core
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as play:
        runs = Path(tmp) / "runs"
        runs.mkdir()
        server_env = {"GACCUM_EXECUTOR": args.executor}
        with dashboard(runs, prefix=("taskset", "-c", str(SERVER_CORE)), env=server_env) as url:
            browser = play.chromium.launch(executable_path=str(chromium_on_core(Path(tmp), BROWSER_CORE)),
                                           args=CHROMIUM_ARGS)
            print(f"config: {setup.describe()}", flush=True)
            warm = run_no_tab(browser, url, runs, replace(setup, max_steps=10))
            show("warm-up", warm, "(not counted)")
            pinning = pinning_report()
            print(f"pinning: {pinning}", flush=True)
            pairs = measure_pairs(browser, url, runs, setup, args.pairs)
            run_s = statistics.median(two.duration_s for _, two in pairs)
            busy, starter, _ = measure_busy_clicks(browser, url, runs, setup, args.clicks, run_s)
            idle = measure_idle_clicks(starter, args.clicks)
            browser.close()
    summary(pairs, busy, idle, setup, pinning)


if __name__ == "__main__":
    main()

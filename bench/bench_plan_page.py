"""The same plan on the Plan page and on the command line, back to back (issue 40).

Each repeat plans, alternately, in a running dashboard (a fresh `streamlit run app.py`, the Plan page in
Chromium: the settings typed, Plan pressed, until its "done: … in X s" line) and with `python -m gaccum_core
plan` in a fresh process, and prints both plans' own seconds (make_plan's clock) and the wall time each took
(the page: from the click; the CLI: the whole command, its imports included), then the medians and the ratio
page / CLI. --busy N runs N busy loops (one core each) throughout, the "busy" condition. The plan is issue 40's
by default: gpt on pydoc, sequence length 32, E=64, 3 MB, fp32/bf16 × cache clearing off/per step ×
checkpointing off/full. No figure is asserted.

    python bench/bench_plan_page.py [--repeats 3] [--busy 1] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from chromium import CHROMIUM, CHROMIUM_ARGS, dashboard  # noqa: E402

# Issue 40's plan: the page's fields (label, value) and the CLI's flags for the same plan.
PLAN = {"model": "gpt", "dataset": "pydoc", "max_seq_len": 32, "effective_batch": 64, "budget_mb": 3.0,
        "amp": ("off", "bf16"), "clear_cache": ("off", "step"), "activation_checkpointing": ("off", "full")}
QUICK = {**PLAN, "amp": ("off",), "clear_cache": ("off",), "activation_checkpointing": ("off",)}
DONE = re.compile(r"done: .* in ([0-9.]+) s")


def cli_seconds(plan: dict) -> tuple[float, float]:
    """The plan on the command line in a fresh process: (its own seconds, the command's wall time)."""
    command = [sys.executable, "-m", "gaccum_core", "plan", "--model", plan["model"], "--dataset", plan["dataset"],
               "--max-seq-len", str(plan["max_seq_len"]), "--effective-batch", str(plan["effective_batch"]),
               "--memory-budget-mb", str(plan["budget_mb"]), "--amp", ",".join(plan["amp"]),
               "--clear-cache", ",".join(plan["clear_cache"]),
               "--activation-checkpointing", ",".join(plan["activation_checkpointing"]), "--json"]
    began = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - began
    if not done.stdout.strip():
        raise RuntimeError(f"plan exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout)["seconds"], wall


def _pick(page, label: str, option: str) -> None:
    """Choose `option` in the selectbox labelled `label`."""
    box = page.get_by_role("combobox", name=label)
    box.click()
    page.get_by_role("option", name=option, exact=True).click()
    _idle(page)


def _number(page, label: str, value: float) -> None:
    box = page.get_by_role("spinbutton", name=label)
    box.fill(str(value))
    box.press("Enter")
    _idle(page)


def _multiselect(page, key: str, values: tuple[str, ...], labels: dict[str, str]) -> None:
    """Make the multiselect with widget key `key` hold exactly `values`, of the options `labels` shows."""
    root = page.locator(f".st-key-{key}")
    for value, label in labels.items():
        remove = root.get_by_role("button", name=f"Remove {label}", exact=True)
        if value not in values and remove.count():
            remove.click()
        elif value in values and not remove.count():
            root.locator("input").fill(label)
            root.locator("input").press("Enter")
            page.keyboard.press("Escape")
        else:
            continue
        _idle(page)


def _idle(page) -> None:
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120_000,
                           polling=20)


def page_seconds(page, url: str, plan: dict, on_click: Callable[[], object] = lambda: None) -> tuple[float, float]:
    """The plan on the Plan page of a running server: (its own seconds, from the click to its done line);
    on_click() right after the click (a profiler attached to the server, say)."""
    from dashboard.controls import AC_LABELS, CLEAR_LABELS
    from gaccum_core.config import AMP_MODES

    page.goto(f"{url}/Plan")
    expect(page.get_by_role("button", name="Plan", exact=True)).to_be_visible(timeout=120_000)
    _idle(page)
    _pick(page, "Model", plan["model"])
    _pick(page, "Dataset", plan["dataset"])
    _number(page, "Sequence length (tokens)", plan["max_seq_len"])
    _number(page, "Effective batch E", plan["effective_batch"])
    _number(page, "Memory budget (MB)", plan["budget_mb"])
    _multiselect(page, "plan_amp", plan["amp"], {mode: mode for mode in AMP_MODES})
    _multiselect(page, "plan_clear_cache", plan["clear_cache"], CLEAR_LABELS)
    _multiselect(page, "plan_activation_checkpointing", plan["activation_checkpointing"], AC_LABELS)
    button = page.locator(".st-key-plan_run button")
    expect(button).to_be_enabled(timeout=60_000)
    began = time.perf_counter()
    button.click()
    on_click()
    done = page.get_by_text(DONE)
    expect(done).to_be_visible(timeout=1_800_000)
    wall = time.perf_counter() - began
    return float(DONE.search(done.inner_text()).group(1)), wall


@contextmanager
def busy_loops(count: int) -> Iterator[None]:
    """`count` processes spinning in a loop (one core each) while the block runs."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def main() -> None:
    """Alternate page and CLI plans; print each and the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="busy loops (one core each) running throughout")
    parser.add_argument("--quick", action="store_true", help="fp32 only, no cache clearing or checkpointing")
    args = parser.parse_args()
    plan = QUICK if args.quick else PLAN
    figures: dict[str, list[tuple[float, float]]] = {"page": [], "cli": []}
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as play, busy_loops(args.busy):
        runs = Path(tmp) / "runs"
        runs.mkdir()
        browser = play.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        with dashboard(runs) as url:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            for repeat in range(args.repeats):
                figures["page"].append(page_seconds(page, url, plan))
                figures["cli"].append(cli_seconds(plan))
                print(f"repeat {repeat + 1} (load {os.getloadavg()[0]:.1f}): page {figures['page'][-1][0]:.1f} s "
                      f"(wall {figures['page'][-1][1]:.1f}), cli {figures['cli'][-1][0]:.1f} s "
                      f"(wall {figures['cli'][-1][1]:.1f})", flush=True)
        browser.close()
    page_s, cli_s = (statistics.median(s for s, _ in figures[k]) for k in ("page", "cli"))
    page_w, cli_w = (statistics.median(w for _, w in figures[k]) for k in ("page", "cli"))
    print(f"medians over {args.repeats} ({args.busy} busy loops): plan page {page_s:.1f} s / cli {cli_s:.1f} s = "
          f"{page_s / cli_s:.2f}x; wall page {page_w:.1f} s / cli {cli_w:.1f} s = {page_w / cli_w:.2f}x")


if __name__ == "__main__":
    main()

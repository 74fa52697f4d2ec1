"""Helpers for driving the real dashboard: a streamlit server on a free loopback port, and Chromium."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader",
                 "--disable-background-networking"]


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def dashboard(runs_dir: Path, timeout_s: float = 90, prefix: Sequence[str] = (),
              env: Mapping[str, str] | None = None) -> Iterator[str]:
    """`streamlit run app.py` on a free loopback port; yields its base URL and stops it after.

    prefix goes before the command, e.g. ("taskset", "-c", "0") to pin the server to core 0; env adds
    to (or overrides) this process's environment for the server, e.g. {"GACCUM_EXECUTOR": "thread"}."""
    port = free_port()
    env = {**os.environ, **(env or {}), "GACCUM_RUNS_DIR": str(runs_dir)}
    log = open(runs_dir.parent / f"streamlit-{port}.log", "w")
    command = [*prefix, sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
               "--server.address", "127.0.0.1", "--server.headless", "true"]
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, server, timeout_s)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _wait_healthy(url: str, server: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"streamlit exited with status {server.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"streamlit did not answer at {url} within {timeout_s} s")


def loss_points(page) -> int:
    """Points plotly.js computed for the first trace of the first chart (the loss chart)."""
    return page.evaluate(LOSS_POINTS_JS)


# plotly.py ships numpy arrays base64-encoded, so count plotly.js's computed points, not trace.x.
LOSS_POINTS_JS = """() => {
    const plot = document.querySelector('.js-plotly-plot');
    return plot && plot.calcdata && plot.calcdata.length ? plot.calcdata[0].length : 0;
}"""


def start_a_long_mlp_run(page, url: str, wait_ms: float = 90_000) -> None:
    """On the Train page: an mlp run on the bundled digits that lasts far longer than any test (Stop
    ends it); presses Start once the settings are in. The settings come in the link (one page load, where
    picking and typing them would rerun the page three times)."""
    from playwright.sync_api import expect

    page.goto(f"{url}/Train?model=mlp&epochs=100000&max_steps=0")
    for label, value in (("Epochs", "100000"), ("Max optimizer steps (0 = no limit)", "0")):
        expect(page.get_by_role("spinbutton", name=label)).to_have_value(value, timeout=wait_ms)
    start = page.locator(".st-key-start button")
    expect(start).to_be_enabled(timeout=30_000)
    start.click()


# For a server whose runs a test watches live: each of a run's first 2000 optimizer steps sleeps 0.1 s (a
# "slow" fault, which its workers inherit), so a long mlp run trains ~10 steps a second (new points at every
# one-second refresh of the charts) instead of taking one of the two cores the whole suite shares.
PACED_RUNS = {"GACCUM_FAULTS": ",".join(f"slow@{step}:0*0.1" for step in range(1, 2001))}


def require_chromium() -> None:
    """Fail the test (never skip it) with the command that installs Debian's Chromium when it is missing."""
    import shutil

    import pytest

    # In CI Chromium is installed by .ci/run and by the README's test command; one line, no traceback.
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: the browser tests drive Debian's Chromium. Install it with "
                    "`apt-get install -y chromium` (as root; `apt-get update` first on a fresh machine), "
                    "or leave these tests out with -m 'not browser'", pytrace=False)


@contextmanager
def dashboard_browser(runs: Path, executor: str = "process",
                      env: Mapping[str, str] | None = None) -> Iterator[tuple[str, Browser]]:
    """A dashboard storing runs in `runs` (created here), training in worker processes (the product's
    default) or in its threads, and Debian's Chromium to drive it; env adds to the server's environment."""
    from playwright.sync_api import sync_playwright

    require_chromium()
    runs.mkdir()
    with dashboard(runs, env={**(env or {}), "GACCUM_EXECUTOR": executor}) as url, sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield url, browser
        except BaseException:
            _show_pages(browser, runs.parent)
            raise
        finally:
            browser.close()


@contextmanager
def browser_window(browser: Browser, **options) -> Iterator[BrowserContext]:
    """A browser window for a test's tabs (each page its own Streamlit session; options as new_context's), closed
    after the test: a Train page left open polls the server every second, on a dashboard the file's tests share."""
    context = browser.new_context(**options)
    try:
        yield context
    finally:
        context.close()


def new_run_dir(runs: Path, before: set[Path]) -> Path:
    """The one run folder made in runs since before (a listing of runs), on a dashboard other tests also ran on;
    beside the runs lies the runs index, a file."""
    (made,) = [p for p in runs.iterdir() if p.is_dir() and p not in before]
    return made


def _show_pages(browser: Browser, folder: Path) -> None:
    """When a browser test fails: each open page's screenshot in folder (a failed test's tmp_path is kept) and
    its text printed, for the report: what the page said when the test gave up."""
    pages = [page for context in browser.contexts for page in context.pages]
    for i, page in enumerate(pages):
        try:
            shot = folder / f"failed-page-{i}.png"
            page.screenshot(path=str(shot), full_page=True, timeout=10_000)
            text = page.inner_text("body", timeout=10_000)
        except Exception as exc:  # the page itself broken: say so, the test's own error follows
            print(f"page {i} ({page.url}) could not be read: {exc}")
            continue
        print(f"page {i} ({page.url}), screenshot {shot}; its text:\n{text[-4000:]}")


def take(page, act: Callable[[], None], taken, tries: int = 4, wait_ms: float = 90_000) -> None:
    """Do act (a click, a pick) until the page shows taken (a Playwright locator assertion, given a timeout).
    An act the page lost (a rerun redrew the element as it was clicked, the page then idle without it: seen in
    CI under load) is done again once the page is idle; an act taken (the page reruns) is waited for, never
    done twice."""
    for _ in range(tries):
        act()
        try:
            taken(15_000)
            return
        except AssertionError:
            if page.get_by_test_id("stStatusWidget").count():  # the page reruns: the act was taken
                taken(wait_ms)
                return
    taken(1)


def choose(page, label: str, option: str, wait_ms: float = 90_000) -> None:
    """Pick `option` in the selectbox labelled `label`, picked again (take) if a redraw lost the pick: the select
    then holds the option."""
    from playwright.sync_api import expect

    box = page.get_by_role("combobox", name=label)
    expect(box).to_be_visible(timeout=wait_ms)

    def pick() -> None:
        box.click()
        page.get_by_role("option", name=option, exact=True).click()

    take(page, pick, lambda ms: expect(box).to_have_value(option, timeout=ms), wait_ms=wait_ms)

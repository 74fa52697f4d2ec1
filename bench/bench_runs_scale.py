"""Listing and drawing thousands of runs: the runs index against reading every run folder.

Trains a few small real runs once (finished fp32 and bf16, failed, diverged, stopped before a first step,
one left queued by a dead server: interrupted), then for each N (default 100 / 1,000 / 10,000) copies
them into a fresh runs directory N times over, each copy with its own id, time and name, in a mix like a
team's (mostly finished), and times, each in a fresh process (a server restarted):

  listing, no index      run_table() with no index file: every run folder read and indexed (what every
                         first visit cost before the index, and what a first visit costs once, after an upgrade)
  listing, restart       run_table() in a new process, the index on disk
  listing, again         the same process's next run_table()
  home / Runs, first     the page's first AppTest run in a new process (the server's first visit after
                         a restart; the page's imports loaded first, and said apart: the same at any N)
  home / Runs, again     the same AppTest run again, after the server's warm-up (a second visit)
  Runs, filter           text typed in the Runs page's filter (a visit's next draw)
  Train, first / again   the same for the Train page, whose runs to overlay come from the index too

It counts the run folders each listing read (the index's work), prints a Markdown table and the growth from
the smallest N (10x, 100x runs). No figure is asserted; absolute times drift on a shared machine.

    python bench/bench_runs_scale.py [--sizes 100,1000,10000]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Of every 20 copies: 14 finished (fp32 and bf16 alike), 2 failed, 1 diverged, 2 stopped before a first
# step, 1 interrupted (left queued by a server that died).
MIX = ("finished", "bf16") * 7 + ("failed", "failed", "diverged", "stopped", "stopped", "queued")
COLUMNS = ("listing, no index", "listing, restart", "listing, again", "home, first", "home, again",
           "Runs, first", "Runs, again", "Runs, filter", "Train, first", "Train, again")
PAGES = {"home": "0_Home.py", "Runs": "2_Runs.py", "Train": "1_Train.py"}


def make_templates(folder: Path) -> dict[str, Path]:
    """One real run of each kind, trained here (mlp on digits, 20 steps): their folders by kind."""
    from gaccum_core.config import RunConfig
    from gaccum_core.faults import Fault, arm
    from gaccum_core.execution.runner import Runner

    runner = Runner(folder, executor="thread")
    tiny = RunConfig(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2, max_steps=20)
    ids = {"finished": runner.submit(tiny, name="baseline")}
    runner.wait(ids["finished"], timeout=300)
    ids["bf16"] = runner.submit(tiny.replace(amp="bf16", lr=0.01), name="bf16")
    runner.wait(ids["bf16"], timeout=300)
    for kind, fault in (("failed", Fault("error", 5)), ("diverged", Fault("nan", 4))):
        arm(fault)
        ids[kind] = runner.submit(tiny, name=kind)
        runner.wait(ids[kind], timeout=300)
    ids["stopped"] = runner.store.create(tiny, name="stopped")
    runner.store.update_status(ids["stopped"], state="stopped", message="stopped before its first step")
    ids["queued"] = runner.store.create(tiny, name="queued")  # its server gone: listed as interrupted
    runner.close()
    return {kind: folder / run_id for kind, run_id in ids.items()}


def fill(runs: Path, templates: dict[str, Path], n: int) -> None:
    """n copies of the template runs, in MIX's proportions, each with its own id (one second apart), name
    and status; model.pt and checkpoint.pt hard-linked (never rewritten), the other files copied."""
    runs.mkdir(parents=True)
    start = time.mktime((2026, 11, 1, 0, 0, 0, 0, 0, -1))
    for i in range(n):
        kind = MIX[i % len(MIX)]
        run_id = time.strftime("%Y%m%d-%H%M%S", time.gmtime(start + i)) + f"-{i:06x}-{kind}-{i}"
        target = runs / run_id
        target.mkdir()
        for source in templates[kind].iterdir():
            if source.name in ("model.pt", "checkpoint.pt"):
                os.link(source, target / source.name)
            elif source.name == "status.json":
                status = json.loads(source.read_text(encoding="utf-8"))
                status.update(run_id=run_id, name=f"{kind}-{i}")
                (target / "status.json").write_text(json.dumps(status, indent=2) + "\n", encoding="utf-8")
            elif source.is_file():
                shutil.copy2(source, target / source.name)


def _counted_reads() -> list[str]:
    """Count the run folders read (catalog.disk_row, the index's only reader) from now on."""
    from gaccum_core.runs import catalog

    read, real = [], catalog.disk_row
    catalog.disk_row = lambda store, run_id: read.append(run_id) or real(store, run_id)
    return read


def listing(runs: str) -> dict[str, float]:
    """In this fresh process: run_table() twice, each timed, with the folders each read."""
    from gaccum_core.runs.catalog import run_table
    from gaccum_core.runs.store import RunStore

    read, store, found = _counted_reads(), RunStore(runs), {}
    for name in ("first", "again"):
        read.clear()
        start = time.perf_counter()
        rows = len(run_table(store))
        found[name], found[f"{name}_read"], found["rows"] = time.perf_counter() - start, len(read), rows
    return found


def visit(runs: str, page: str) -> dict[str, float]:
    """In this fresh process: the page's imports, its first AppTest run, the warm-up awaited, a second run
    (and on the Runs page, text typed in the filter); each timed."""
    os.environ.update(GACCUM_RUNS_DIR=runs, GACCUM_EXECUTOR="thread")
    start = time.perf_counter()
    from streamlit.testing.v1 import AppTest

    import dashboard.server

    page_file = ROOT / "app_pages" / PAGES[page]
    tree = ast.parse(page_file.read_text(encoding="utf-8"))  # the page's own imports, as a server holds them
    exec(compile(ast.Module([n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], []), "imports",
                 "exec"), {})
    found = {"imports": time.perf_counter() - start}
    read = _counted_reads()
    script = ROOT / "app.py" if page == "home" else page_file  # app.py: its navigation, the home page first
    app = AppTest.from_file(str(script), default_timeout=600)
    for name in ("first", "again"):
        read.clear()
        start = time.perf_counter()
        app.run()
        found[name], found[f"{name}_read"] = time.perf_counter() - start, len(read)
        assert not app.exception, [e.value for e in app.exception]
        if page == "home":
            dashboard.server.wait(300)  # a second visit finds the warm-up (torch, the runner) done
    if page == "Runs":
        app.text_input(key="runs_filter_text").input("bf16")
        start = time.perf_counter()
        app.run()
        found["filter"], found["shown"] = time.perf_counter() - start, len(app.dataframe(key="runs_table").value)
    return found


def _child(*args: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(runs: Path) -> dict[str, object]:
    """Every column for one runs directory, each in fresh processes."""
    cold, warm = _child("--listing", str(runs)), _child("--listing", str(runs))
    home, runs_page = _child("--visit", "home", str(runs)), _child("--visit", "Runs", str(runs))
    train = _child("--visit", "Train", str(runs))
    assert cold["first_read"] == cold["rows"], cold  # no index: every folder read
    return {"listing, no index": (cold["first"], cold["first_read"]),
            "listing, restart": (warm["first"], warm["first_read"]), "listing, again": (warm["again"], warm["again_read"]),
            "home, first": (home["first"], home["first_read"]), "home, again": (home["again"], home["again_read"]),
            "Runs, first": (runs_page["first"], runs_page["first_read"]),
            "Runs, again": (runs_page["again"], runs_page["again_read"]),
            "Runs, filter": (runs_page["filter"], None),
            "Train, first": (train["first"], train["first_read"]),
            "Train, again": (train["again"], train["again_read"]),
            "imports": (home["imports"], runs_page["imports"], train["imports"]), "shown": runs_page["shown"]}


def _cell(seconds: float, read: int | None) -> str:
    return f"{seconds:.2f} s" + ("" if read is None else f" ({read:,} read)")


def report(results: dict[int, dict[str, object]]) -> None:
    print("| runs | " + " | ".join(COLUMNS) + " |")
    print("|---:|" + "---:|" * len(COLUMNS))
    for n, found in results.items():
        print(f"| {n:,} | " + " | ".join(_cell(*found[c]) for c in COLUMNS) + " |")
    sizes = list(results)
    for n in sizes[1:]:
        ratios = [found[c][0] / results[sizes[0]][c][0] for found in (results[n],) for c in COLUMNS]
        print(f"| × from {sizes[0]:,} to {n:,} ({n // sizes[0]}× the runs) | " +
              " | ".join(f"{r:.1f}×" for r in ratios) + " |")
    for n, found in results.items():
        home, runs_page, train = found["imports"]
        print(f"\n{n:,} runs: imports before a first draw (the same at any N) {home:.2f} s home, "
              f"{runs_page:.2f} s Runs, {train:.2f} s Train; the filter 'bf16' showed {found['shown']:,} runs", end="")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="comma-separated numbers of runs")
    parser.add_argument("--listing", metavar="RUNS", help=argparse.SUPPRESS)
    parser.add_argument("--visit", nargs=2, metavar=("PAGE", "RUNS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.listing:
        print(json.dumps(listing(args.listing)))
        return
    if args.visit:
        print(json.dumps(visit(args.visit[1], args.visit[0])))
        os._exit(0)  # the warm-up's runner and threads: nothing to wait for
    with tempfile.TemporaryDirectory(prefix="gaccum-scale-") as folder:
        templates = make_templates(Path(folder) / "templates")
        results = {}
        for n in (int(s) for s in args.sizes.split(",")):
            runs = Path(folder) / f"runs-{n}"
            fill(runs, templates, n)
            results[n] = measure(runs)
            shutil.rmtree(runs)
            print(f"{n:,} runs measured", file=sys.stderr, flush=True)
    report(results)


if __name__ == "__main__":
    main()

"""Every CUDA path checked in one command, the day a GPU is at hand (issue 35).

Runs the `cuda` tests (tests/cuda: the oracle on cuda, bf16 and fp16 with a backing-off GradScaler, the
allocator's columns, cache clearing, the planner and a run out of memory for real, torch.compile, the device
line), then the engine-vs-textbook, language-model and activation-checkpointing benchmarks on the GPU, and
prints one Markdown table for the README's GPU section: what was checked, the figure, pass or fail.

    python3 bench/gpu_check.py [--quick] [--skip-benches]     # from the checkout; PYTHONPATH is set for you

On a machine without CUDA it says so in one line and exits 0, running nothing. It imports no streamlit or
plotly and runs under torch 2.11 or later with pytest and pandas (a GPU image often has those and not the
dashboard): the tests run as `python -m pytest -m cuda tests/cuda` in a child process, and each benchmark as
`python bench/NAME.py --device cuda --json`, whose last line is one JSON object of its headline figures.
Exit status: 0 when everything checked passed, 1 when something failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
FIGURE_MARK = "figure:"  # a cuda test prints 'figure: <text>' for the table (max |Δ| and the like)
# Each benchmark: (what the table calls it, its arguments on the GPU, its quick arguments).
BENCHES = (
    ("engine vs textbook loop (cnn, digits)", ["bench/bench_engine_vs_textbook.py", "--processes", "1",
                                               "--repeats", "3"], ["--quick"]),
    ("language model vs textbook loop (gpt on pydoc)", ["bench/bench_lm_vs_textbook.py", "--processes", "1",
                                                        "--repeats", "3"], ["--quick"]),
    ("activation checkpointing (gpt mini, tiny Llama)", ["bench/bench_activation_checkpointing.py"], ["--quick"]),
)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def run_tests(timeout_s: float) -> list[tuple[str, str, str]]:
    """(test, figure, pass / fail / skipped: reason) for each cuda test, from pytest's JUnit XML."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "cuda.xml"
        command = [sys.executable, "-m", "pytest", "-m", "cuda", "tests/cuda", "-q", "-p", "no:cacheprovider",
                   "-o", "addopts=-ra", "-o", "junit_logging=system-out", f"--junitxml={report}", "-s"]
        done = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout_s)
        if not report.exists():
            last = ((done.stdout + done.stderr).strip().splitlines() or ["no output"])[-1]
            return [("cuda tests", last[:160], "fail")]
        rows = []
        for case in ElementTree.parse(report).getroot().iter("testcase"):
            out = case.findtext("system-out") or ""
            figures = [line.split(FIGURE_MARK, 1)[1].strip() for line in out.splitlines() if FIGURE_MARK in line]
            failed = case.find("failure") if case.find("failure") is not None else case.find("error")
            skipped = case.find("skipped")
            if failed is not None:
                result = "fail: " + (failed.get("message") or "").splitlines()[0][:120]
            elif skipped is not None:
                result = "skipped: " + (skipped.get("message") or "")[:120]
            else:
                result = "pass"
            rows.append((case.get("name", "?"), "; ".join(figures) or f"{float(case.get('time', 0)):.1f} s", result))
        return rows


def run_bench(name: str, arguments: list[str], timeout_s: float) -> tuple[str, str, str]:
    """(name, its figures, pass / fail) from the benchmark's last line, a JSON object."""
    command = [sys.executable, *arguments, "--device", "cuda", "--json"]
    try:
        done = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return name, f"did not finish in {timeout_s:.0f} s", "fail"
    lines = done.stdout.strip().splitlines()
    try:
        figures = json.loads(lines[-1]) if done.returncode == 0 and lines else None
    except json.JSONDecodeError:
        figures = None
    if not isinstance(figures, dict):
        last = (done.stderr.strip().splitlines() or lines or ["no output"])[-1]
        return name, last[:160], f"fail (exit {done.returncode})"
    return name, figure_words(figures), "pass"


def figure_words(figures: dict) -> str:
    """A benchmark's JSON object in words: its flat figures ('ratio_median 0.987, engine_samples_per_s 5120'),
    and per row of a 'rows' list its own ('gpt b=16 full: samples/s ×0.76, activation MB ×0.28, peak 123')."""
    def shown(value: object) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)
    skip = ("bench", "device", "device_name")
    words = [f"{key} {shown(value)}" for key, value in figures.items()
             if key not in skip and not isinstance(value, (dict, list)) and value is not None]
    for row in figures.get("rows") or ():
        words.append(f"{row.get('model')} b={row.get('b')} {row.get('mode')}: samples/s ×{shown(row.get('speed_ratio'))}"
                     f", activation MB ×{shown(row.get('activation_ratio'))}"
                     + (f", peak {shown(row.get('peak_mb'))} MB" if row.get("peak_mb") is not None else ""))
    return "; ".join(words)


def table(rows: list[tuple[str, str, str]]) -> str:
    """The rows as a Markdown table, a cell's own | escaped (max \\|Δ\\|)."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")
    lines = ["| checked | figure | result |", "|---|---|---|"]
    lines += [f"| {cell(what)} | {cell(figure)} | {cell(result)} |" for what, figure, result in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the benchmarks' short settings (a smoke run)")
    parser.add_argument("--skip-benches", action="store_true", help="the cuda tests only")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per child process (default 900)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(f"gpu_check: no CUDA device on this machine (torch {torch.__version__}): nothing was run.")
        return 0
    device = torch.cuda.get_device_name(0)
    rows = run_tests(args.timeout_s)
    if not args.skip_benches:
        rows += [run_bench(name, [*arguments, *(quick if args.quick else [])], args.timeout_s)
                 for name, arguments, quick in BENCHES]
    print(f"checked on {device} ({torch.cuda.device_count()} GPU(s), torch {torch.__version__}, CUDA "
          f"{torch.version.cuda}) on {datetime.date.today().isoformat()}\n")
    print(table(rows))
    return 0 if all(result == "pass" or result.startswith("skipped") for _, _, result in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

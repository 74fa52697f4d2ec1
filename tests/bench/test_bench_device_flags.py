"""The benchmarks a GPU check runs: --device cpu keeps the CPU report and --json adds one JSON line of the
headline figures; --device cuda without CUDA is refused in one line; none of them needs streamlit or plotly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
HEAD = {"bench", "device", "device_name"}
REFUSING = ("bench_engine_vs_textbook", "bench_lm_vs_textbook", "bench_activation_checkpointing", "bench_loss_agg")
pytestmark = pytest.mark.multiprocess  # each benchmark runs in a fresh Python process (conftest.py)
# Each bench's command line run in one process (torch imported once, not once per bench): its exit status, stdout
# and stderr, as `python bench/NAME.py --quick --device cuda` would end.
_REFUSALS = """
import contextlib, io, json, runpy, sys

folder, names, ended = sys.argv[1], sys.argv[2:], {}
sys.path.insert(0, folder)  # where `python bench/NAME.py` finds bench/common.py
for name in names:
    sys.argv = [f"{folder}/{name}.py", "--quick", "--device", "cuda"]
    out, err, status = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit as exc:
            status = exc.code
    ended[name] = [status, out.getvalue(), err.getvalue()]
print(json.dumps(ended))
"""


def _json_line(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_blocker_refuses_streamlit_and_plotly(no_dashboard_env):
    for name in ("streamlit", "plotly.graph_objects"):
        done = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True,
                              env=no_dashboard_env, timeout=60)
        assert done.returncode != 0 and "blocked" in done.stderr


def test_engine_bench_quick_on_the_cpu_prints_its_ratios_and_a_json_line(run_bench):
    done = run_bench("bench_engine_vs_textbook", "--quick", "--device", "cpu", "--json")
    figures = _json_line(done)
    assert "median ratio engine/textbook, wall clock, over 2 repeats" in done.stdout
    assert "median ratio engine/textbook, CPU time" in done.stdout and "CPU-only" not in done.stdout
    assert set(figures) == HEAD | {"model", "b", "k", "repeats", "ratio_median", "ratio_quartiles",
                                   "cpu_time_ratio_median", "engine_samples_per_s", "textbook_samples_per_s"}
    assert figures["bench"] == "engine_vs_textbook" and figures["device"] == "cpu" and figures["repeats"] == 2
    assert figures["ratio_median"] > 0 and figures["engine_samples_per_s"] > 0 and figures["textbook_samples_per_s"] > 0
    assert len(figures["ratio_quartiles"]) == 2


def test_lm_bench_fp16_on_the_cpu_prints_its_ratios_and_a_json_line_and_both_loops_end_with_the_same_weights(run_bench):
    """One quick run with fp16 (a GradScaler in both loops) checks what an amp-off run would print and more."""
    done = run_bench("bench_lm_vs_textbook", "--quick", "--device", "cpu", "--amp", "fp16", "--micro-batch-size", "2",
                     "--accum-steps", "2", "--json")
    figures = _json_line(done)
    assert "median ratio engine/textbook, wall clock, undisturbed repeats only" in done.stdout
    assert "same weights after the measured steps: yes" in done.stdout
    assert set(figures) == HEAD | {"model", "amp", "b", "k", "max_seq_len", "repeats", "ratio_median",
                                   "ratio_quartiles", "training_only_ratio_median", "engine_tokens_per_s",
                                   "textbook_tokens_per_s", "same_weights", "max_weight_diff"}
    assert figures["bench"] == "lm_vs_textbook" and figures["device"] == "cpu" and figures["amp"] == "fp16"
    assert figures["same_weights"] is True and figures["engine_tokens_per_s"] > 0


@pytest.fixture(scope="module")
def refusals(no_dashboard_env) -> dict[str, list]:
    """Each of REFUSING run with --quick --device cuda, streamlit and plotly blocked: [exit status, stdout, stderr]."""
    done = subprocess.run([sys.executable, "-c", _REFUSALS, str(ROOT / "bench"), *REFUSING], capture_output=True,
                          text=True, cwd=ROOT, env=no_dashboard_env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("name", REFUSING)
def test_device_cuda_without_cuda_exits_2_with_one_line(refusals, name):
    status, stdout, stderr = refusals[name]
    assert status == 2 and stdout == ""
    assert stderr.strip() == (f"{name}.py: --device cuda: this machine has no CUDA device "
                              "(torch.cuda.is_available() is False); use --device cpu")

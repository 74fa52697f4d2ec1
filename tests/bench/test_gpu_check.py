"""bench/gpu_check.py and the cuda tests on a machine without CUDA (issue 35): the command says so in one line and
exits 0, the cuda tests skip with the reason "no CUDA device", and neither needs streamlit, plotly or pytest-xdist
(a GPU image often lacks them): checked with those blocked in a child process."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import gpu_check  # noqa: E402

WITHOUT_DASHBOARD = "import sys; sys.modules['streamlit'] = None; sys.modules['plotly'] = None; "

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")


def test_without_cuda_it_says_so_in_one_line_and_runs_nothing():
    done = subprocess.run([sys.executable, "-c", WITHOUT_DASHBOARD + "import runpy; sys.argv = ['gpu_check.py']; "
                           "runpy.run_path('bench/gpu_check.py', run_name='__main__')"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [f"gpu_check: no CUDA device on this machine (torch {torch.__version__}):"
                                                " nothing was run."]


def test_the_cuda_tests_skip_with_their_reason_without_the_dashboard_or_xdist():
    done = subprocess.run([sys.executable, "-c", WITHOUT_DASHBOARD + "import pytest; sys.exit(pytest.main(['-m', "
                           "'cuda', 'tests/', '-q', '-rs', '-p', 'no:cacheprovider', '-p', 'no:xdist']))"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skipped and all(line.endswith("no CUDA device") for line in skipped)
    assert " skipped" in done.stdout.splitlines()[-1] and "error" not in done.stdout.splitlines()[-1]


def test_the_table_reads_the_figures_each_benchmark_prints_as_json():
    assert gpu_check.figure_words({"ratio": 0.98712, "samples_per_s": 5120.0, "steps": 20}) == \
        "ratio 0.9871, samples_per_s 5120, steps 20"
    text = gpu_check.table([("oracle", "max |Δ| 3.1e-07", "pass"), ("compile", "-", "fail: 2e-3 > 1e-4")])
    assert text.splitlines() == ["| checked | figure | result |", "|---|---|---|",
                                 "| oracle | max \\|Δ\\| 3.1e-07 | pass |", "| compile | - | fail: 2e-3 > 1e-4 |"]

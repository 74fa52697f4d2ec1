"""bench/gpu_check.py and the cuda tests on a machine without CUDA (issue 35): the command says so in one line and
exits 0, the cuda tests skip with the reason "no CUDA device", and neither needs streamlit, plotly or pytest-xdist
(a GPU image often lacks them): checked with those blocked in a child process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import gpu_check  # noqa: E402

# What a GPU image may lack: the dashboard, pytest-xdist, and the packages the CPU paths alone use (psutil,
# scikit-learn for digits, datasets, tensorboard). A child Python sees site-packages without them: python -S and a
# folder of links to every other entry (a missing package is then missing as on that image, find_spec and all).
MISSING = ("streamlit", "plotly", "xdist", "pytest_xdist", "psutil", "sklearn", "scikit_learn", "datasets",
           "tensorboard")
SITE = Path(pytest.__file__).resolve().parents[1]


def _without(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    """Run code in a Python whose site-packages lacks MISSING, in the checkout."""
    site = tmp_path / "site"
    site.mkdir()
    for entry in SITE.iterdir():
        if entry.name.split("-")[0].split(".")[0].lower() not in MISSING:
            (site / entry.name).symlink_to(entry)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
    return subprocess.run([sys.executable, "-S", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")


def test_without_cuda_it_says_so_in_one_line_and_runs_nothing(tmp_path):
    done = _without(tmp_path, "import runpy, sys\nsys.argv = ['gpu_check.py']\n"
                              "runpy.run_path('bench/gpu_check.py', run_name='__main__')")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [f"gpu_check: no CUDA device on this machine (torch {torch.__version__}):"
                                                " nothing was run."]


def test_the_cuda_tests_skip_with_their_reason_without_the_dashboard_or_xdist(tmp_path):
    done = _without(tmp_path, "import sys, pytest\nsys.exit(pytest.main(['-m', 'cuda', 'tests/', '-q', '-rs', '-p', "
                              "'no:cacheprovider']))")
    assert done.returncode == 0, done.stdout + done.stderr
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    other = [line for line in skipped if not line.endswith("no CUDA device")]
    assert skipped and not other, other
    assert " skipped" in done.stdout.splitlines()[-1] and "error" not in done.stdout.splitlines()[-1]


def test_the_table_reads_the_figures_each_benchmark_prints_as_json():
    assert gpu_check.figure_words({"bench": "x", "device": "cuda", "ratio": 0.98712, "samples_per_s": 5120.0,
                                   "steps": 20, "ratio_quartiles": [0.9, 1.0]}) == \
        "ratio 0.9871; samples_per_s 5120; steps 20"
    rows = {"rows": [{"model": "gpt mini", "b": 16, "mode": "full", "speed_ratio": 0.7612, "activation_ratio": 0.279,
                      "peak_mb": 123.4}]}
    assert gpu_check.figure_words(rows) == "gpt mini b=16 full: samples/s ×0.7612, activation MB ×0.279, peak 123.4 MB"
    text = gpu_check.table([("oracle", "max |Δ| 3.1e-07", "pass"), ("compile", "-", "fail: 2e-3 > 1e-4")])
    assert text.splitlines() == ["| checked | figure | result |", "|---|---|---|",
                                 "| oracle | max \\|Δ\\| 3.1e-07 | pass |", "| compile | - | fail: 2e-3 > 1e-4 |"]


def test_the_engine_and_the_planner_need_none_of_those(tmp_path):
    """What the cuda tests drive (the engine, the planner) imports none of MISSING: checked on the CPU."""
    done = _without(tmp_path, (
        "from gaccum_core.config import RunConfig\n"
        "from gaccum_core.train.engine import Engine\n"
        "from gaccum_core.train.metrics import RowKeeper\n"
        "from gaccum_core.plan.planner import PlanRequest, make_plan\n"
        "rows = RowKeeper()\n"
        "Engine(RunConfig(model='mlp', dataset='fake', image_size=8, fake_samples=64, device='cpu')).run("
        "rows, steps=2, evaluate=False)\n"
        "plan = make_plan(PlanRequest(RunConfig(model='cnn', dataset='fake', image_size=16, fake_samples=64, "
        "device='cpu', micro_batch_size=1, accum_steps=1), 16, 50.0, time_cap_s=0.1))\n"
        "print(len(rows.steps), plan.recommended.micro_batch_size)\n"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[0] == "2"

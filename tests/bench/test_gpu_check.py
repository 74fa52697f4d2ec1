"""bench/gpu_check.py and the cuda tests on a machine without CUDA (issue 35): the command says so in one line and
exits 0, the cuda tests skip with the reason "no CUDA device", and neither needs streamlit, plotly or pytest-xdist
(a GPU image often lacks them): checked with those blocked in a child process."""

import json
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


# The three checks in one such Python (torch imported once, not once per check), each apart: gpu_check's exit
# status and output, the engine's and the planner's output (or the traceback of what failed), then the cuda tests
# under pytest, whose report is the output before the last line; the last line is the JSON of the first two.
_CHECKS = """
import contextlib, io, json, runpy, sys, traceback

def captured(code):
    out, status = io.StringIO(), 0
    with contextlib.redirect_stdout(out):
        try:
            code()
        except SystemExit as exc:
            status = exc.code
        except BaseException:
            status = traceback.format_exc()
    return [status, out.getvalue()]

def gpu_check():
    sys.argv = ["gpu_check.py"]
    runpy.run_path("bench/gpu_check.py", run_name="__main__")

def engine_and_planner():
    from gaccum_core.config import RunConfig
    from gaccum_core.train.engine import Engine
    from gaccum_core.train.metrics import RowKeeper
    from gaccum_core.plan.planner import PlanRequest, make_plan
    rows = RowKeeper()
    Engine(RunConfig(model="mlp", dataset="fake", image_size=8, fake_samples=64, device="cpu")).run(
        rows, steps=2, evaluate=False)
    plan = make_plan(PlanRequest(RunConfig(model="cnn", dataset="fake", image_size=16, fake_samples=64,
                                           device="cpu", micro_batch_size=1, accum_steps=1), 16, 50.0, time_cap_s=0.1))
    print(len(rows.steps), plan.recommended.micro_batch_size)

ended = {"gpu_check": captured(gpu_check), "engine_and_planner": captured(engine_and_planner)}
import pytest
ended["cuda_tests"] = int(pytest.main(["-m", "cuda", "tests/", "-q", "-rs", "-p", "no:cacheprovider"]))
print(json.dumps(ended))
"""


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> tuple[dict, list[str]]:
    """_CHECKS run without MISSING: (the JSON of what each check ended with, the cuda tests' report lines)."""
    done = _without(tmp_path_factory.mktemp("without"), _CHECKS)
    assert done.returncode == 0, done.stderr[-3000:]
    *report, last = done.stdout.strip().splitlines()
    return json.loads(last), report


pytestmark = [pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA"),
              pytest.mark.multiprocess]  # gpu_check and the cuda tests run in a fresh Python process


def test_without_cuda_it_says_so_in_one_line_and_runs_nothing(checked):
    status, stdout = checked[0]["gpu_check"]
    assert status == 0, status
    assert stdout.strip().splitlines() == [f"gpu_check: no CUDA device on this machine (torch {torch.__version__}):"
                                           " nothing was run."]


def test_the_cuda_tests_skip_with_their_reason_without_the_dashboard_or_xdist(checked):
    ended, report = checked
    assert ended["cuda_tests"] == 0, "\n".join(report)
    skipped = [line for line in report if line.startswith("SKIPPED")]
    other = [line for line in skipped if not line.endswith("no CUDA device")]
    assert skipped and not other, other
    assert " skipped" in report[-1] and "error" not in report[-1]


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


def test_the_engine_and_the_planner_need_none_of_those(checked):
    """What the cuda tests drive (the engine, the planner) imports none of MISSING: checked on the CPU."""
    status, stdout = checked[0]["engine_and_planner"]
    assert status == 0, status
    assert stdout.split()[0] == "2"

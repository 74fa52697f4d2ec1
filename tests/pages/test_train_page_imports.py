"""What the server imports before the Train page's Start is enabled (issue 40): on a cold server the Train page
waits for the warm spare worker, which imports torch beside the server on the same cores, so every second the
server spends importing before Start delays it. A fresh server process (home page, warm-up, then the Train page's
first run) is checked against a list of heavy modules it must leave to the worker or to the pages that need
them, and the Train page's own first run against an allowance: its modules, plotly and the standard library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Each takes a second or more to import, or pulls in a package tree of hundreds of modules; none is needed to
# draw the Train page or to check its settings. torch._dynamo: the spare worker imports it for the first step.
HEAVY = ("torch._dynamo", "torch._inductor", "sympy", "tensorboard", "torch.utils.tensorboard", "transformers",
         "tokenizers", "huggingface_hub", "datasets", "timm", "torchvision", "sklearn", "scipy", "matplotlib")
# What the Train page's first run may add to what the home page and the warm-up imported: its own modules and
# the charts' plotly (any standard-library module too).
TRAIN_PAGE_ALLOWANCE = {"dashboard", "gaccum_core", "plotly", "_plotly_utils"}
_SERVER = """
import json, os, sys
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(sys.argv[1], default_timeout=120).run()
from dashboard import server
assert server.wait(120)
before = set(sys.modules)
at.switch_page("app_pages/1_Train.py").run()
assert not at.exception, at.exception
print(json.dumps({"modules": sorted(sys.modules), "added": sorted(set(sys.modules) - before)}))
sys.stdout.flush()
os._exit(0)
"""


@pytest.fixture(scope="module")
def server_modules(tmp_path_factory) -> dict[str, list[str]]:
    """The modules of a fresh server process after the Train page's first run, and those that run added."""
    runs = tmp_path_factory.mktemp("runs")
    done = subprocess.run([sys.executable, "-c", _SERVER, str(ROOT / "app.py")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "GACCUM_RUNS_DIR": str(runs)})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


@pytest.mark.multiprocess
def test_the_server_imports_nothing_heavy_before_start(server_modules):
    assert "torch" in server_modules["modules"]  # the warm-up's: the page checks its settings with it
    assert _heavy(server_modules["modules"]) == []


@pytest.mark.multiprocess
def test_the_train_pages_first_run_imports_only_its_allowance(server_modules):
    standard = {*sys.stdlib_module_names, *("_" + name for name in sys.stdlib_module_names)}
    packages = {m.split(".")[0] for m in server_modules["added"]}
    assert packages - TRAIN_PAGE_ALLOWANCE - standard == set()

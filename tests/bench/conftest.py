"""Benchmarks run as a GPU image runs them: in a fresh process (and its workers) that cannot import the
dashboard's streamlit and plotly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = ("streamlit", "plotly")

# Imported by every Python process whose PYTHONPATH holds its folder, workers included: a meta-path finder
# ahead of all others that answers as if the packages were not installed.
_SITECUSTOMIZE = f'''
import sys


class _NoDashboard:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked: the benchmarks must run without it)")
        return None


sys.meta_path.insert(0, _NoDashboard())
'''

RunBench = Callable[..., subprocess.CompletedProcess]


@pytest.fixture(scope="session")
def no_dashboard_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a process that refuses to import streamlit and plotly."""
    folder = tmp_path_factory.mktemp("no_dashboard")
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    path = [str(folder), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


@pytest.fixture
def run_bench(no_dashboard_env: dict[str, str]) -> RunBench:
    """Run bench/<name>.py with these arguments, streamlit and plotly blocked; its completed process."""
    def run(name: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py"), *args], capture_output=True,
                              text=True, cwd=ROOT, env=no_dashboard_env, timeout=timeout)
    return run

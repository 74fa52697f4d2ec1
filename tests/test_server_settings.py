"""The dashboard server's settings (the GACCUM_* variables the README documents) are checked before it starts
anything: a bad value is one line in the terminal and exit status 2, no traceback on a page, no worker left."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from gaccum_core.execution import executors
from gaccum_core.execution import server_env
from tests.chromium import free_port

ROOT = Path(__file__).resolve().parents[1]
VARIABLES = ("GACCUM_RUNS_DIR", "GACCUM_CACHE_DIR", "GACCUM_USER_CODE", "GACCUM_SPARE_IDLE_S", "GACCUM_EXECUTOR")


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """None of the server's variables set; a file and a folder to name."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "folder").mkdir()
    return tmp_path


@pytest.mark.parametrize("name,value,allowed", [
    ("GACCUM_SPARE_IDLE_S", "abc", "a number of seconds above 0"),
    ("GACCUM_SPARE_IDLE_S", "-5", "a number of seconds above 0"),
    ("GACCUM_EXECUTOR", "threads", "process or thread"),
    ("GACCUM_RUNS_DIR", "{tmp}/a-file", "a folder"),
    ("GACCUM_CACHE_DIR", "{tmp}/a-file", "a folder"),
    ("GACCUM_USER_CODE", "{tmp}/a-file", "a folder"),
    ("GACCUM_USER_CODE", "{tmp}/missing", "a folder"),
])
def test_a_bad_value_is_one_line_naming_the_variable_the_value_and_what_is_allowed(clean_env, monkeypatch, name,
                                                                                   value, allowed):
    value = value.replace("{tmp}", str(clean_env))
    monkeypatch.setenv(name, value)
    (line,) = server_env.env_problems()
    assert line.startswith(f"{name}={value!r} is not allowed: ") and allowed in line and "\n" not in line


@pytest.mark.parametrize("name,value", [
    ("GACCUM_SPARE_IDLE_S", "30"), ("GACCUM_SPARE_IDLE_S", "inf"), ("GACCUM_EXECUTOR", "thread"),
    ("GACCUM_EXECUTOR", "process"), ("GACCUM_RUNS_DIR", "{tmp}/folder"), ("GACCUM_RUNS_DIR", "{tmp}/not-yet/runs"),
    ("GACCUM_CACHE_DIR", "{tmp}/not-yet"), ("GACCUM_USER_CODE", "{tmp}/folder"), ("GACCUM_USER_CODE", ""),
])
def test_usable_values_pass(clean_env, monkeypatch, name, value):
    monkeypatch.setenv(name, value.replace("{tmp}", str(clean_env)))
    assert server_env.env_problems() == []


def test_the_executors_checked_are_the_runners():
    assert executors.EXECUTORS is server_env.EXECUTORS  # one list, not a copy to keep equal


def _workers_of(pid: int) -> list[psutil.Process]:
    """Processes started by the server pid (their owner: workers, spares, torchrun jobs), alive now."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("GACCUM_OWNER_PID") == str(pid):
                found.append(process)
        except (psutil.Error, OSError):
            continue
    return found


def _visit_once(url: str, server: subprocess.Popen) -> None:
    """Ask url once the server listens (refused while it starts); return on any answer, or when it ends."""
    deadline = time.monotonic() + 120
    while server.poll() is None and time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=60).close()
            return
        except urllib.error.URLError as exc:  # an HTTP error status too: an answer
            if not isinstance(exc.reason, ConnectionRefusedError):
                return
        except OSError:  # the connection reset: the server ended while answering
            return
        time.sleep(0.2)


@pytest.mark.multiprocess  # a real `streamlit run app.py`
def test_a_server_with_a_bad_setting_exits_with_one_line_before_any_worker(tmp_path):
    env = {**os.environ, "GACCUM_RUNS_DIR": str(tmp_path / "runs"), "GACCUM_EXECUTOR": "process",
           "GACCUM_SPARE_IDLE_S": "abc"}
    port = free_port()
    # The script health check runs app.py in the server as a browser's first visit does, without a browser.
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
                               "--server.headless", "true", "--server.scriptHealthCheckEnabled", "true"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _visit_once(f"http://127.0.0.1:{port}/_stcore/script-health-check", server)
        _, err = server.communicate(timeout=30)
        assert server.returncode == 2
        (line,) = [line for line in err.splitlines() if "GACCUM" in line]
        assert line.startswith("gaccum: error: GACCUM_SPARE_IDLE_S='abc' is not allowed: a number of seconds")
        assert "Traceback" not in err
        assert _workers_of(server.pid) == []
    finally:
        for process in _workers_of(server.pid):
            process.kill()
        if server.poll() is None:
            server.kill()
            server.communicate()

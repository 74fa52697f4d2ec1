"""The Home page's device line on a two-GPU machine (nvidia-smi a script on PATH, torch.cuda's count faked): every
GPU with its free memory and the run on it, looked at again on each visit, and never with a torch.cuda call that
creates a CUDA context in the server (mem_get_info, get_device_name)."""

import os
import threading
import time
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from dashboard import server
from gaccum_core.config import DEFAULT_RUN
from gaccum_core.execution.snapshot import RunSnapshot
from gaccum_core.runs.store import RunStore
from gaccum_core.states import RunState

ROOT = Path(__file__).resolve().parents[2]
H100 = "NVIDIA H100 80GB HBM3"


def _answer(free0: int, free1: int) -> str:
    """nvidia-smi's answer (index, uuid, memory.free, memory.total in MiB, name) for two GPUs."""
    return (f"0, GPU-5f2a3c1e-8d4b-7a60-2c19-0e4b1d9a7f31, {free0}, 81559, {H100}\n"
            f"1, GPU-8b1e44d2-93c7-1f05-6ad2-c37e90b25e48, {free1}, 81559, {H100}\n")


def _line(index: int, free_mib: int, run: str) -> str:
    return f"cuda:{index} · {H100} · {free_mib / 1024:.1f} GiB free of {81559 / 1024:.1f} GiB · {run}"


class _Runner:
    """The runner the page sees: one run training on cuda:1."""

    def __init__(self, store: RunStore):
        self.store = store

    def snapshots(self) -> list[RunSnapshot]:
        return [RunSnapshot("run-1", DEFAULT_RUN, RunState.RUNNING, "", "", 3, 10, 0, 1.0, None, (), (),
                            name="fp16 try", devices=("cuda:1",))]

    def warm_text(self) -> str:
        return ""


@pytest.fixture
def two_gpus(runs_dir, tmp_path_factory, monkeypatch):
    """A server warmed up on a machine whose nvidia-smi lists two H100s and whose torch sees two CUDA devices;
    yields the file nvidia-smi answers from and the torch.cuda calls that would have made a context."""
    bin_dir = tmp_path_factory.mktemp("bin")
    smi = bin_dir / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncat "$(dirname "$0")/answer.csv"\n')
    smi.chmod(0o755)
    (bin_dir / "answer.csv").write_text(_answer(81004, 40211))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    context_calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: context_calls.append("get_device_name") or H100)
    monkeypatch.setattr(torch.cuda, "mem_get_info",
                        lambda *a: context_calls.append("mem_get_info") or (60 * 2**30, 80 * 2**30))
    runner = _Runner(RunStore(runs_dir))
    for name, value in {"_started": False, "_done": threading.Event(), "_result": {}, "_devices": {},
                        "DEVICE_FRESH_S": 0.0, "_check_defaults": lambda: None, "get_runner": lambda: runner}.items():
        monkeypatch.setattr(server, name, value, raising=False)
    server.start()
    assert server.wait(60)
    yield bin_dir / "answer.csv", context_calls
    _looks_done()  # none writes into the real server's state once the patches are undone


def _looks_done() -> None:
    deadline = time.monotonic() + 30
    while server.devices_looking() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not server.devices_looking()


def test_every_gpu_with_its_run_looked_at_again_on_each_visit(two_gpus):
    answer, context_calls = two_gpus
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    assert not at.exception
    assert at.info[0].value.split("  \n") == [_line(0, 81004, "no run"), _line(1, 40211, "running fp16 try")]
    answer.write_text(_answer(80000, 1024))  # the run on cuda:1 took more memory since
    at.run()  # this visit looks again: its line is drawn when the look is back,
    _looks_done()
    at.run()  # at the latest on the next redraw
    assert at.info[0].value.split("  \n") == [_line(0, 80000, "no run"), _line(1, 1024, "running fp16 try")]
    assert context_calls == []

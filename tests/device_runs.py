"""A runner whose runs hold the GPUs their settings name, without a GPU: cuda:N resolves to itself (auto and cuda to
cuda:0) and a run's execution only waits until the test ends it. For the device queue's tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import torch

import gaccum_core.execution.runner as runner_module
from gaccum_core.execution.runner import Runner
from gaccum_core.execution.snapshot import RunSnapshot
from gaccum_core.states import RunState


@contextmanager
def stub_gpu_runner(runs_dir, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Runner, Callable[[str], None]]]:
    """(runner, end(run_id)): a thread-executor runner whose runs go on until end(run_id) is called."""
    ends: dict[str, threading.Event] = {}
    monkeypatch.setattr(runner_module, "resolve_device", lambda name: torch.device(
        "cuda", int(name.split(":")[1]) if ":" in name else 0))

    def execute(self, run):
        ends.setdefault(run.run_id, threading.Event()).wait(30)
        return RunState.FINISHED, "done"

    monkeypatch.setattr(Runner, "_execute", execute)
    try:
        yield Runner(runs_dir), lambda run_id: ends.setdefault(run_id, threading.Event()).set()
    finally:
        for event in ends.values():
            event.set()


def reached(runner: Runner, run_id: str, state: RunState, timeout: float = 10.0) -> RunSnapshot:
    """The run's snapshot once it is in `state` (asserted within the timeout)."""
    deadline = time.monotonic() + timeout
    while (snap := runner.snapshot(run_id)).state != state and time.monotonic() < deadline:
        time.sleep(0.01)
    assert snap.state == state
    return snap

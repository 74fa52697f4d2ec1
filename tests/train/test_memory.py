"""Cache clearing is timed without the GPU work still queued (issue 41, item 3), checked on the CPU with a fake
GPU: a clock that only the fakes move, a queue of kernels that empty_cache's cudaFree waits for, as CUDA's does."""

from __future__ import annotations

import pytest
import torch

from gaccum_core.train import memory
from gaccum_core.train.memory import clear_cache

QUEUED_S = 5.0   # backward kernels still running on the fake GPU when clearing starts
FREEING_S = 0.25  # what empty_cache itself takes on it


class FakeGpu:
    """A clock, and a stream of queued work: synchronize and empty_cache (cudaFree) both wait for it."""

    def __init__(self) -> None:
        self.now, self.queued, self.calls = 0.0, QUEUED_S, []

    def _drain(self) -> None:
        self.now, self.queued = self.now + self.queued, 0.0

    def synchronize(self, device: torch.device | None = None) -> None:
        self.calls.append(("synchronize", device))
        self._drain()

    def empty_cache(self) -> None:
        self.calls.append(("empty_cache", None))
        self._drain()
        self.now += FREEING_S


@pytest.fixture
def gpu(monkeypatch):
    fake = FakeGpu()
    monkeypatch.setattr(torch.cuda, "synchronize", fake.synchronize)
    monkeypatch.setattr(torch.cuda, "empty_cache", fake.empty_cache)
    monkeypatch.setattr(memory.time, "perf_counter", lambda: fake.now)
    return fake


def test_clearing_on_cuda_waits_for_the_queued_work_before_its_timer_starts(gpu):
    device = torch.device("cuda:1")
    seconds = clear_cache(device)
    assert gpu.calls == [("synchronize", device), ("empty_cache", None)]
    assert seconds == FREEING_S  # the 5 s of queued backward are not counted as clearing


def test_clearing_on_the_cpu_touches_no_cuda_call(gpu):
    clear_cache(torch.device("cpu"))
    assert gpu.calls == []

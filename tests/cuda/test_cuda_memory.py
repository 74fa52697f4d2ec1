"""Memory on a GPU, for real. The allocator's columns move by a tensor of known size, on the GPU they name, and the
peak starts again each step; cache clearing is timed without the GPU work still queued (issue 41). Out of memory
(issue 35): the planner under a cap far below the card (a probe that runs out is caught and recorded, and the size
it recommends then trains), and a run that runs out ends `failed` with the advice while the next run trains (its
memory was released).

`torch.cuda.set_per_process_memory_fraction` caps this process's allocator at CAP_MB, so the cnn's larger
micro-batches on 128×128 images run out of memory while a budget above the cap lets the planner try them.
Marked `cuda`; skipped with the reason "no CUDA device" without one. No streamlit, no plotly."""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.plan.planner import PlanRequest, config_from_plan, make_plan
from gaccum_core.plan.search import OUT_OF_MEMORY
from gaccum_core.train.engine import Engine
from gaccum_core.train.memory import MB, MemoryProbe, clear_cache
from gaccum_core.train.metrics import RowKeeper

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

CAP_MB = 1024  # what this process may allocate; the card has far more
BIG = RunConfig(model="cnn", dataset="fake", image_size=128, fake_samples=1024, device="cuda", optimizer="sgd",
                eval_every=10**9, checkpoint_every=0, micro_batch_size=1, accum_steps=1)


@pytest.fixture
def capped():
    """The allocator capped at CAP_MB for the test, the cap lifted and the cache emptied after."""
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(CAP_MB * MB / total, 0)
    yield
    torch.cuda.set_per_process_memory_fraction(1.0, 0)
    torch.cuda.empty_cache()


def test_a_probe_that_runs_out_of_memory_is_recorded_and_the_recommended_size_trains(capped):
    plan = make_plan(PlanRequest(BIG, 1024, 4.0 * CAP_MB, time_cap_s=0.3))
    oom = sorted(c.micro_batch_size for c in plan.candidates if c.status == OUT_OF_MEMORY)
    print(f"\nfigure: out of memory at b={oom} under a {CAP_MB} MB cap; recommended "
          f"b={plan.recommended and plan.recommended.micro_batch_size}")
    assert any(c.status == OUT_OF_MEMORY for c in plan.candidates), [(c.micro_batch_size, c.status)
                                                                     for c in plan.candidates]
    assert plan.recommended is not None
    run = config_from_plan(BIG, plan).replace(max_steps=2)
    rows = RowKeeper()
    Engine(run).run(rows, evaluate=False)  # raises torch.OutOfMemoryError if the recommendation does not fit
    assert len(rows.steps) == 2


def test_a_run_out_of_memory_fails_with_the_advice_and_the_next_run_trains(capped, tmp_path):
    pytest.importorskip("psutil", reason="the runner watches its workers with psutil, not installed here")
    from gaccum_core.execution.runner import Runner  # noqa: PLC0415 - only with psutil
    from gaccum_core.states import RunState  # noqa: PLC0415

    runner = Runner(tmp_path)
    try:
        before = torch.cuda.memory_allocated()
        failed = runner.submit(BIG.replace(micro_batch_size=1024, max_steps=2))
        ended = runner.wait(failed, timeout=300)
        assert ended.state == RunState.FAILED
        assert "out of memory at micro_batch_size=1024" in ended.message and "accum_steps=" in ended.message
        assert torch.cuda.memory_allocated() - before < 64 * MB  # the failed run's tensors are gone
        after = runner.submit(BIG.replace(micro_batch_size=8, accum_steps=2, max_steps=2))
        assert runner.wait(after, timeout=300).state == RunState.FINISHED
    finally:
        runner.close()


KNOWN_MB = 64  # a whole number of the allocator's 2 MiB blocks: it takes exactly this much


def test_the_allocator_columns_move_by_a_known_tensor_and_the_peak_starts_again_each_step():
    probe = MemoryProbe(torch.device("cuda:0"))
    probe.start_step()
    base = probe.read()
    known = torch.empty(KNOWN_MB * MB, dtype=torch.uint8, device="cuda:0")
    held = probe.read()
    del known
    after = probe.read()
    assert held["mem_allocated_mb"] - base["mem_allocated_mb"] == pytest.approx(KNOWN_MB, abs=1e-9)
    assert held["mem_reserved_mb"] >= held["mem_allocated_mb"]
    assert after["mem_allocated_mb"] == base["mem_allocated_mb"]
    assert after["mem_peak_mb"] >= base["mem_allocated_mb"] + KNOWN_MB  # the peak of the step kept it
    probe.start_step()
    assert probe.read()["mem_peak_mb"] == after["mem_allocated_mb"]  # a new step's peak starts from now


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_each_gpus_columns_are_its_own():
    first, second = MemoryProbe(torch.device("cuda:0")), MemoryProbe(torch.device("cuda:1"))
    before = first.read()["mem_allocated_mb"], second.read()["mem_allocated_mb"]
    known = torch.empty(KNOWN_MB * MB, dtype=torch.uint8, device="cuda:1")
    assert first.read()["mem_allocated_mb"] == before[0]
    assert second.read()["mem_allocated_mb"] == pytest.approx(before[1] + KNOWN_MB, abs=1e-9)
    del known


def _matmuls(a: torch.Tensor, n: int) -> None:
    for _ in range(n):
        a @ a


def test_clearing_the_cache_does_not_count_the_gpu_work_still_queued():
    """empty_cache's cudaFree waits for every queued kernel: a chain of about 2 s of matmuls is queued (not waited
    for), then the cache cleared; its time must be the clearing's alone, far below the chain's."""
    device = torch.device("cuda:0")
    a = torch.randn(4096, 4096, device=device)
    _matmuls(a, 2)
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    _matmuls(a, 10)
    torch.cuda.synchronize(device)
    n = max(10, min(2000, round(10 * 2.0 / (time.perf_counter() - start))))  # about 2 s of work on this GPU
    start = time.perf_counter()
    _matmuls(a, n)
    queued = clear_cache(device)
    torch.cuda.synchronize(device)
    chain = time.perf_counter() - start
    idle = statistics.median(clear_cache(device) for _ in range(3))
    print(f"\nfigure: clearing {queued * 1000:.0f} ms behind {chain:.2f} s of queued matmuls ({n}); "
          f"{idle * 1000:.0f} ms with nothing queued")
    assert chain >= 1.0  # the chain was long enough to show
    assert queued < chain / 2

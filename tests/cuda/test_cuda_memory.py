"""Out of memory on a GPU, for real (issue 35): the planner under a cap far below the card (a probe that runs out
is caught and recorded, and the size it recommends then trains), and a run that runs out ends `failed` with the
advice while the next run trains (its memory was released).

`torch.cuda.set_per_process_memory_fraction` caps this process's allocator at CAP_MB, so the cnn's larger
micro-batches on 128×128 images run out of memory while a budget above the cap lets the planner try them.
Marked `cuda`; skipped with the reason "no CUDA device" without one. No streamlit, no plotly."""

from __future__ import annotations

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.plan.planner import PlanRequest, config_from_plan, make_plan
from gaccum_core.plan.search import OUT_OF_MEMORY
from gaccum_core.train.engine import Engine
from gaccum_core.train.memory import MB
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
    from gaccum_core.runs.runner import Runner  # noqa: PLC0415 - only with psutil
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

"""A plan on a GPU takes its turn in the device queue (issue 41 item 5): it measures in a worker process of its own
only once the run on its GPU has ended, and a run submitted while it measures waits for it.

Marked `cuda`; skipped with the reason "no CUDA device" without one. No streamlit, no plotly, no scikit-learn (fake
images); the runner watches its workers with psutil, skipped saying so where the GPU image lacks it."""

from __future__ import annotations

import time

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.plan.planner import PlanRequest, make_plan
from gaccum_core.states import RunState

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

WAIT_S = 600  # only so a broken run fails instead of hanging
BASE = RunConfig(model="mlp", dataset="fake", image_size=8, fake_samples=120, device="cuda:0", optimizer="sgd",
                 epochs=1000, max_steps=40, eval_every=10**9, checkpoint_every=0)
PACED = ",".join(f"slow@{step}:0*0.1" for step in range(1, 200))  # each step 0.1 s: the run is going when we look


@pytest.fixture
def runner(tmp_path):
    pytest.importorskip("psutil", reason="the runner watches its workers with psutil, not installed here")
    from gaccum_core.execution.runner import Runner  # noqa: PLC0415 - only with psutil

    made = Runner(tmp_path / "runs", executor="process", warm_spare=False)
    yield made
    made.close()


def test_a_plan_measures_aside_after_the_run_on_its_gpu_and_a_later_run_waits_for_it(runner, monkeypatch):
    from gaccum_core.execution.aside import call_for  # noqa: PLC0415 - imports the device queue, as the page does

    monkeypatch.setenv("GACCUM_FAULTS", PACED)
    first = runner.submit(BASE, name="baseline")
    deadline = time.monotonic() + WAIT_S
    while not runner.snapshot(first).metrics and time.monotonic() < deadline:
        assert not runner.snapshot(first).done, runner.snapshot(first).message
        time.sleep(0.05)
    monkeypatch.setenv("GACCUM_FAULTS", "")  # the first run's worker has it; the plan and the later run go at speed
    said, measuring, later, waiting = [], [], [], []

    def progress(*_):
        if not measuring:
            measuring.append(runner.snapshot(first).state)
            later.append(runner.submit(BASE.replace(max_steps=2), name="later"))
        waiting.append(runner.snapshot(later[0]).state)

    request = PlanRequest(BASE.replace(micro_batch_size=1, accum_steps=1), 16, 512.0, time_cap_s=0.2)
    plan = call_for(request.base, make_plan, request, progress=progress, device=torch.device("cuda", 0),
                    turn=lambda devices: runner.turn(devices, waiting=said.append, poll_s=0.1))
    assert said and said[0] == "run baseline on cuda:0"
    assert measuring == [RunState.FINISHED]  # the run had ended before the plan's first candidate
    assert plan.device == "cuda:0" and plan.memory_source == "allocator" and plan.recommended is not None
    assert set(waiting) == {RunState.QUEUED}  # at every progress call of the plan, the later run still waited
    assert runner.wait(later[0], WAIT_S).state == RunState.FINISHED

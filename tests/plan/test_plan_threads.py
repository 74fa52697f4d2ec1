"""A plan on the CPU times on the cores the load leaves free (issue 40): torch's threads cut while the plan runs,
on the command line and on the Plan page alike, and given back after. A team of threads on cores other work
holds waits at every op for its descheduled member, and the same plan took 17 s or 82 s by chance."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import gaccum_core.plan.planner as planner
from gaccum_core.plan.planner import make_plan

from tests.plan.test_planner import default_like, fake_engine  # noqa: F401 - the fixture, shared


@pytest.fixture
def two_threads():
    """torch on 2 intra-op threads (the suite runs on 1) on a 2-core machine, as before after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


def threads_while_planning(monkeypatch, load: float) -> list[int]:
    """torch's thread count at each memory probe of a plan made at this load average on 2 cores."""
    seen: list[int] = []
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    make_plan(default_like(amp=("off",), clear_cache=("off",)), lambda *args: seen.append(torch.get_num_threads()))
    return seen


def test_a_plan_on_a_busy_cpu_runs_on_the_cores_left_free_and_gives_the_threads_back(fake_engine, two_threads,
                                                                                     monkeypatch):
    fake_engine()
    assert set(threads_while_planning(monkeypatch, load=1.1)) == {1}  # one core taken by someone else
    assert torch.get_num_threads() == 2
    assert set(threads_while_planning(monkeypatch, load=3.5)) == {1}  # never fewer than one
    assert set(threads_while_planning(monkeypatch, load=0.2)) == {2}  # a quiet machine: all of them
    assert torch.get_num_threads() == 2


def test_the_plan_page_plans_on_the_cores_left_free(fake_engine, two_threads, monkeypatch, runs_dir):
    """Where the page runs the plan (the server's script thread), the same cut, not the server's thread count."""
    from tests.pages.test_plan_page import plan_page, set_inputs

    engine, seen = fake_engine(), []
    measure = engine.measure
    monkeypatch.setattr(planner, "measure", lambda *args: seen.append(torch.get_num_threads()) or measure(*args))
    at = set_inputs(plan_page())
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.1, 1.1, 1.1))
    at.button(key="plan_run").click().run()
    assert not at.exception and at.session_state["plan_result"].candidates
    assert seen and set(seen) == {1}


_FRESH_PLAN = """
import gc, sys
from gaccum_core.config import RunConfig
from gaccum_core.plan.planner import PlanRequest, make_plan
assert "torch._dynamo" not in sys.modules
walked = []  # at each report: whether a collection would walk torch._dynamo's objects
def report(*args):
    dynamo = sys.modules.get("torch._dynamo")
    walked.append(dynamo is not None and any(o is dynamo.__dict__ for o in gc.get_objects()))
base = RunConfig(model="gpt", dataset="pydoc", max_seq_len=16, device="cpu", micro_batch_size=1, accum_steps=1)
make_plan(PlanRequest(base, 4, 1.0, clear_cache=("step",), time_cap_s=0.05, timed_steps=2), report)
print("torch._dynamo" in sys.modules, any(walked))
"""


@pytest.mark.multiprocess
def test_what_a_first_optimizer_step_imports_is_frozen_with_the_heap_before_the_plan():
    """torch.optim's first step imports torch._dynamo (~135,000 objects): imported after the plan froze the heap,
    every gc.collect() of clear_cache=step walked them (80-90 ms a call on a busy 2-core box, 29% of a plan's
    time on the command line, where nothing had imported it before)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FRESH_PLAN], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.split() == ["True", "False"], done.stderr[-2000:]

"""The Plan page on a GPU waits in the device queue for the run on its GPU, and its bar says which run it waits for
(dashboard.checks.device_turn, which the page passes to call_for). No GPU here: the runner's runs hold the GPUs
their settings name without one (tests/device_runs.py)."""

import threading
import time

from dashboard.checks import device_turn
from gaccum_core.config import RunConfig
from gaccum_core.states import RunState
from tests.device_runs import reached, stub_gpu_runner


class Bar:
    """What st.progress returns, as far as the turn uses it: the texts it was given, in order."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def progress(self, value: float, text: str) -> None:
        self.texts.append(text)


def test_the_bar_says_which_run_the_plan_waits_for_then_that_it_measures(tmp_path, monkeypatch):
    with stub_gpu_runner(tmp_path, monkeypatch) as (runner, end):
        run_id = runner.submit(RunConfig(device="cuda:0", model="mlp"), name="baseline")
        reached(runner, run_id, RunState.RUNNING)
        bar, inside = Bar(), threading.Event()

        def plan():
            with device_turn(runner, bar, "measuring the first candidate…")(("cuda:0",)):
                inside.set()

        planner = threading.Thread(target=plan)
        planner.start()
        deadline = time.monotonic() + 10
        while not bar.texts and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not inside.is_set()
        assert bar.texts[0] == "waiting for run baseline on cuda:0 to end before measuring…"
        end(run_id)
        planner.join(10)
        assert inside.is_set() and bar.texts[-1] == "measuring the first candidate…"


def test_the_plan_page_on_a_gpu_takes_its_turn_on_that_gpu_and_plans_aside(runs_dir, monkeypatch):
    """The page's wiring, with the GPU faked where the page asks for it: Plan holds cuda:0 in the server's device
    queue around the worker process's plan (recorded here, not started)."""
    import contextlib

    import torch

    import gaccum_core.plan.planner as planner
    import gaccum_core.execution.aside as aside
    import gaccum_core.train.device as device
    from gaccum_core.execution.runner import Runner
    from tests.pages.test_plan_page import plan_page

    monkeypatch.setattr(device, "resolve_device", lambda name: torch.device("cuda", 0))
    monkeypatch.setattr(planner, "memory_info", lambda d: (2 * 2**30, 16 * 2**30))
    held, asked = [], []

    @contextlib.contextmanager
    def turn(self, devices, waiting=None, poll_s=0.5):
        held.append(devices)
        try:
            yield
        finally:
            held.append("released")

    def recorded(function, *args, progress=None):
        asked.append((function.__name__, held[:]))
        raise RuntimeError("recorded here")

    monkeypatch.setattr(Runner, "turn", turn)
    monkeypatch.setattr(aside, "call_aside", recorded)
    at = plan_page()
    assert at.number_input(key="plan_memory_budget_mb").value == round(16 * 1024 * 0.9, 1)
    at.button(key="plan_run").click().run()
    assert asked == [("make_plan", [("cuda:0",)])] and held == [("cuda:0",), "released"]
    assert [e.value for e in at.error] == ["Cannot plan: recorded here"]

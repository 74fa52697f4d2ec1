"""The device queue: a run holds every device it uses and waits for all of them, first come first served; a page's
plan takes its turn in the same queue. No GPU here: the devices are passed in, and the runner's executions are stubs
that end when the test says."""

import threading
import time
from dataclasses import dataclass

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.execution.device_queue import DeviceQueue, devices_of
from gaccum_core.states import RunState
from tests.device_runs import reached, stub_gpu_runner
from dashboard.live import _progress_text as progress_text

CUDA0, CUDA1 = torch.device("cuda", 0), torch.device("cuda", 1)


def test_a_run_uses_its_gpu_and_a_data_parallel_job_one_gpu_per_local_rank():
    assert devices_of(RunConfig(device="cpu"), torch.device("cpu")) == ("cpu",)
    assert devices_of(RunConfig(device="cpu", nproc=2), torch.device("cpu")) == ("cpu",)  # gloo ranks share the CPU
    assert devices_of(RunConfig(device="cuda:1"), CUDA1) == ("cuda:1",)
    assert devices_of(RunConfig(device="auto"), CUDA0) == ("cuda:0",)
    assert devices_of(RunConfig(device="auto", nproc=2), CUDA0) == ("cuda:0", "cuda:1")
    # local rank r trains on cuda:r whatever GPU the setting names; with 2 nodes, this node holds its own 3 ranks'
    assert devices_of(RunConfig(device="cuda:1", nproc=3, nnodes=2), CUDA1) == ("cuda:0", "cuda:1", "cuda:2")


@dataclass(eq=False)
class Item:
    devices: tuple[str, ...]


def test_a_job_waits_for_all_its_gpus_and_is_not_starved_by_later_one_gpu_runs():
    queue = DeviceQueue()
    first, job, later, elsewhere = Item(("cuda:0",)), Item(("cuda:0", "cuda:1")), Item(("cuda:1",)), Item(("cuda:2",))
    for item in (first, job, later, elsewhere):
        queue.add(item)
    # cuda:1 is free, yet the run submitted after the job waiting for it does not take it; cuda:2 nobody wants
    assert queue.admit() == [first, elsewhere]
    assert [queue.position(i) for i in (first, job, later, elsewhere)] == [0, 1, 2, 0]
    assert queue.blocker(job) == (first, ("cuda:0",)) and queue.blocker(later) == (job, ("cuda:1",))
    queue.release(first)
    assert queue.admit() == [job]
    assert queue.admit() == [] and queue.blocker(later) == (job, ("cuda:1",))
    queue.release(job)
    assert queue.admit() == [later] and not queue.waits(later)


def test_a_waiter_taken_out_frees_what_it_reserved():
    queue = DeviceQueue()
    first, job, later = Item(("cuda:0",)), Item(("cuda:0", "cuda:1")), Item(("cuda:1",))
    for item in (first, job, later):
        queue.add(item)
    assert queue.admit() == [first]
    assert queue.remove(job) and not queue.remove(job)
    assert queue.admit() == [later]


@pytest.fixture
def stubbed(tmp_path, monkeypatch):
    with stub_gpu_runner(tmp_path, monkeypatch) as made:
        yield made


def test_a_one_gpu_run_waits_while_a_data_parallel_job_on_auto_holds_its_gpu(stubbed):
    runner, end = stubbed
    job = runner.submit(RunConfig(device="auto", nproc=2, model="mlp"), name="job")
    single = runner.submit(RunConfig(device="cuda:1", model="mlp"), name="single")
    reached(runner, job, RunState.RUNNING)
    time.sleep(0.1)  # a run let through would be running by now
    waiting = runner.snapshot(single)
    assert waiting.state == RunState.QUEUED and waiting.queue_position == 1 and waiting.devices == ("cuda:1",)
    assert waiting.waiting_for == "run job on cuda:1"
    assert progress_text(waiting).endswith("queued: position 1 on cuda:1, waiting for run job on cuda:1")
    assert runner.snapshot(job).devices == ("cuda:0", "cuda:1")
    end(job)
    reached(runner, single, RunState.RUNNING)
    end(single)
    assert runner.wait(single, 10).state == RunState.FINISHED


def test_a_plan_waits_for_the_run_on_its_gpu_and_a_run_waits_for_the_plan(stubbed):
    runner, end = stubbed
    first = runner.submit(RunConfig(device="cuda:0", model="mlp"), name="baseline")
    reached(runner, first, RunState.RUNNING)
    said, entered, leave = [], threading.Event(), threading.Event()

    def plan():
        with runner.turn(("cuda:0",), waiting=said.append, poll_s=0.01):
            entered.set()
            leave.wait(30)

    planner = threading.Thread(target=plan)
    planner.start()
    while not said:
        time.sleep(0.01)
    assert not entered.is_set() and said[0] == "run baseline on cuda:0"
    with runner.turn(("cuda:1",)):  # another GPU: no wait
        pass
    end(first)
    assert entered.wait(10)
    second = runner.submit(RunConfig(device="cuda:0", model="mlp"))
    time.sleep(0.1)
    assert runner.snapshot(second).state == RunState.QUEUED and runner.snapshot(second).queue_position == 1
    assert runner.snapshot(second).waiting_for == "a plan on cuda:0"
    leave.set()
    planner.join(10)
    reached(runner, second, RunState.RUNNING)
    end(second)


def test_a_plan_the_page_stops_while_it_waits_leaves_the_queue(stubbed):
    runner, end = stubbed
    first = runner.submit(RunConfig(device="cuda:0", model="mlp"))
    reached(runner, first, RunState.RUNNING)

    def stop_the_page(words):
        raise KeyboardInterrupt  # Streamlit stops a page's run by raising in its thread

    with pytest.raises(KeyboardInterrupt):
        with runner.turn(("cuda:0",), waiting=stop_the_page, poll_s=0.01):
            pass
    second = runner.submit(RunConfig(device="cuda:0", model="mlp"))
    end(first)
    reached(runner, second, RunState.RUNNING)
    end(second)


def test_a_queued_run_abandoned_at_exit_never_starts_when_its_gpu_frees(stubbed):
    runner, end = stubbed
    first = runner.submit(RunConfig(device="cuda:0", model="mlp"))
    second = runner.submit(RunConfig(device="cuda:0", model="mlp"))
    reached(runner, first, RunState.RUNNING)
    runner.abandon(second, "the server exited")
    end(first)
    reached(runner, first, RunState.FINISHED)
    time.sleep(0.1)  # a run let through would be running by now
    assert runner.snapshot(second).state == RunState.STOPPED and runner.snapshot(second).message == "the server exited"

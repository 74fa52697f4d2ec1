"""A page's computation on a GPU goes aside, into a worker process that holds the GPU in the device queue while it
measures; on the CPU it stays in the page's thread. No GPU here: the device is passed in."""

import os
from contextlib import contextmanager

import pytest
import torch

import gaccum_core.usercode as usercode
from gaccum_core.config import RunConfig
from gaccum_core.lab.equivalence import compare_gradients
from gaccum_core.execution.aside import call_for, goes_aside
from workers import children_running

CONFIG = RunConfig(model="mlp", micro_batch_size=4, accum_steps=2, device="cpu")


def test_a_computation_on_a_gpu_goes_aside_and_one_on_the_cpu_stays(monkeypatch):
    assert goes_aside(CONFIG, torch.device("cuda", 1)) and goes_aside(CONFIG.replace(device="auto"), torch.device("cuda", 0))
    assert not goes_aside(CONFIG, torch.device("cpu")) and not goes_aside(CONFIG, None)
    monkeypatch.setattr(usercode, "_confined", [lambda: True])  # a page's thread, on your own model
    assert goes_aside(CONFIG.replace(model="mine.py:build"), torch.device("cpu"))


def test_the_cpu_computes_in_this_thread_without_a_turn():
    turns = []
    pid = call_for(CONFIG, lambda progress: os.getpid(), device=torch.device("cpu"), turn=turns.append)
    assert pid == os.getpid() and turns == []


@pytest.mark.multiprocess
def test_a_gpu_computation_measures_in_a_worker_process_while_it_holds_its_gpu():
    held, seen = [], []

    @contextmanager
    def turn(devices):
        held.append(devices)
        yield
        held.append("released")

    def progress(*_):
        if not seen:  # the worker computing it, and whether the turn is held meanwhile
            seen.extend(p.pid for p in children_running("gaccum_core.execution.aside"))
            seen.append(held == [("cuda:1",)])

    report = call_for(CONFIG, compare_gradients, CONFIG, progress=progress, device=torch.device("cuda", 1), turn=turn)
    assert report.equal
    assert held == [("cuda:1",), "released"]
    assert len(seen) == 2 and seen[0] != os.getpid() and seen[1] is True

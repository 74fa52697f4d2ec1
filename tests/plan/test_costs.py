"""Costly options say what they cost on this machine before Start."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.plan import costs
from gaccum_core.plan.costs import Cost, autocast_cost, cache_clearing_cost, warnings_for


def test_nothing_costly_chosen_gives_no_warning():
    assert warnings_for("off", "off", 4, "cpu") == {}


def test_cache_clearing_per_micro_batch_is_priced_per_step(monkeypatch):
    monkeypatch.setattr(costs, "cache_clearing_cost", lambda device, runs=(): Cost(0.1, 1.0))
    micro = warnings_for("micro", "off", 4, "cpu")["clear_cache"]
    assert "100 ms" in micro and "4 micro-batches" in micro and "about 0.40 s" in micro
    step = warnings_for("step", "off", 4, "cpu")["clear_cache"]
    assert "about 0.10 s" in step


def _run(run_id: str, devices: tuple[str, ...], clear_cache: str, per_step_s: list[float], micro_batches: int = 3):
    """A run as the runner's snapshot shows it: its config, its devices and its step rows."""
    rows = [{"step": i + 1, "micro_batches": micro_batches, "cache_clear_s": s} for i, s in enumerate(per_step_s)]
    return SimpleNamespace(run_id=run_id, config=RunConfig(clear_cache=clear_cache), devices=devices, metrics=rows)


def test_the_clearing_figure_is_the_latest_clearing_run_on_this_device(monkeypatch):
    """An idle server has nothing cached to free: the figure is what a run on the device timed, per call."""
    monkeypatch.setattr(costs, "clear_cache", _never)
    runs = [_run("older", ("cuda:0",), "step", [0.9, 0.9]),
            _run("cleared", ("cuda:0", "cuda:1"), "micro", [0.3, 0.33, 0.36, math.nan]),  # 0.1, 0.11, 0.12 s a call
            _run("elsewhere", ("cuda:2",), "micro", [5.0]),
            _run("kept", ("cuda:0",), "off", [0.0, 0.0])]
    note = warnings_for("micro", "off", 4, "cuda:0", runs)["clear_cache"]
    assert "110 ms each time as run cleared measured it on this device (the median of its last 3 steps)" in note
    assert "about 0.44 s added to every optimizer step" in note


def test_without_a_clearing_run_a_gpu_figure_is_gc_collect_timed_without_touching_the_gpu(monkeypatch):
    def no_cuda(*args, **kwargs):
        raise AssertionError("the server made a CUDA call to price cache clearing")
    monkeypatch.setattr(torch.cuda, "synchronize", no_cuda)
    monkeypatch.setattr(torch.cuda, "empty_cache", no_cuda)
    note = warnings_for("step", "off", 4, "cuda:0", [_run("on-the-cpu", ("cpu",), "step", [0.5])])["clear_cache"]
    assert "each time for gc.collect alone (measured just now in this server;" in note


def _never(device):
    raise AssertionError("timed here although a run on the device measured it")


def test_autocast_on_the_cpu_is_priced_only_when_it_is_slow(monkeypatch):
    monkeypatch.setattr(costs, "autocast_cost", lambda device, amp: Cost(0.5, 87.0))
    slow = warnings_for("off", "fp16", 4, "cpu")["amp"]
    assert slow.startswith("fp16 autocast on this CPU") and "87.0×" in slow
    monkeypatch.setattr(costs, "autocast_cost", lambda device, amp: Cost(0.01, 1.1))
    assert warnings_for("off", "bf16", 4, "cpu") == {}


def test_the_figures_are_measured_here():
    assert 0 < cache_clearing_cost("cpu").seconds < 60
    for amp in ("fp16", "bf16"):
        cost = autocast_cost("cpu", amp)
        assert cost.seconds > 0 and math.isfinite(cost.ratio) and cost.ratio > 0


def test_an_unknown_precision_is_refused():
    with pytest.raises(KeyError):
        autocast_cost("cpu", "fp8")

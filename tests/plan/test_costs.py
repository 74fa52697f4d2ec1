"""Costly options say what they cost on this machine before Start."""

from __future__ import annotations

import math

import pytest

from gaccum_core.plan import costs
from gaccum_core.plan.costs import Cost, autocast_cost, cache_clearing_cost, warnings_for


def test_nothing_costly_chosen_gives_no_warning():
    assert warnings_for("off", "off", 4, "cpu") == {}


def test_cache_clearing_per_micro_batch_is_priced_per_step(monkeypatch):
    monkeypatch.setattr(costs, "cache_clearing_cost", lambda device: Cost(0.1, 1.0))
    micro = warnings_for("micro", "off", 4, "cpu")["clear_cache"]
    assert "100 ms" in micro and "4 micro-batches" in micro and "about 0.40 s" in micro
    step = warnings_for("step", "off", 4, "cpu")["clear_cache"]
    assert "about 0.10 s" in step


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

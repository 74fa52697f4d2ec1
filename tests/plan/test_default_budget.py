"""The Plan page's default memory budget on CUDA: the GPU's whole memory less the margin, the same whether a run
holds memory on it or not (the plan measures once the device queue gave it the GPU). No GPU here: what nvidia-smi and
torch would say is passed in."""

import torch

import gaccum_core.plan.planner as planner
from gaccum_core.plan.planner import default_budget_mb
from gaccum_core.train.gpus import DeviceFacts, Gpu

MIB, GIB = 2**20, 2**30


def facts(*gpus: Gpu, visible: str | None = None) -> DeviceFacts:
    return DeviceFacts(gpus, "", len(gpus), visible, "", 4, None)


def gpu(index: int, free_gib: float, total_gib: float) -> Gpu:
    return Gpu(index, f"GPU-{index}", "NVIDIA H100", int(free_gib * GIB), int(total_gib * GIB))


def test_the_default_is_the_whole_gpu_less_the_margin_whether_a_run_holds_memory_or_not(monkeypatch):
    idle, busy = facts(gpu(0, 79.0, 80.0)), facts(gpu(0, 9.0, 80.0))
    # torch's answer agrees with nvidia-smi's: a figure from either must not move with the run
    monkeypatch.setattr(planner, "memory_info", lambda device: (79 * GIB, 80 * GIB))
    with_idle = default_budget_mb(torch.device("cuda", 0), 0.1, idle)
    monkeypatch.setattr(planner, "memory_info", lambda device: (9 * GIB, 80 * GIB))
    with_run = default_budget_mb(torch.device("cuda", 0), 0.1, busy)
    assert with_idle == with_run == 80 * 1024 * 0.9


def test_each_gpu_its_own_total_numbered_as_cuda_visible_devices_numbers_them(monkeypatch):
    monkeypatch.setattr(planner, "memory_info", lambda device: (_ for _ in ()).throw(AssertionError("no CUDA call")))
    two = (gpu(0, 1.0, 24.0), gpu(1, 1.0, 48.0))
    assert default_budget_mb(torch.device("cuda", 1), 0.1, facts(*two)) == 48 * 1024 * 0.9
    assert default_budget_mb(torch.device("cuda", 0), 0.1, facts(*two, visible="1")) == 48 * 1024 * 0.9


def test_without_nvidia_smi_torch_gives_the_total_and_the_cpu_has_no_default(monkeypatch):
    monkeypatch.setattr(planner, "memory_info", lambda device: (3 * GIB, 16 * GIB))
    no_smi = DeviceFacts((), "nvidia-smi not found", 1, None, "", 4, None)
    assert default_budget_mb(torch.device("cuda", 0), 0.1, no_smi) == 16 * 1024 * 0.9
    assert default_budget_mb(torch.device("cpu"), 0.1, no_smi) is None

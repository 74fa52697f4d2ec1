"""The device chosen and said once, torch.cuda asked only where CUDA is: the choices offered, the one-line
description, the processes a run may take, and why autocast cannot run (one line, naming the error)."""

import pytest
import torch

from gaccum_core.config import ConfigError
from gaccum_core.train import device as dev


@pytest.fixture
def no_cuda(monkeypatch):
    """A machine without CUDA, whose torch.cuda fails if asked anything else."""
    def asked(*args, **kwargs):
        raise AssertionError("torch.cuda asked on a machine without CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in ("device_count", "current_device", "get_device_name", "mem_get_info"):
        monkeypatch.setattr(torch.cuda, name, asked)


@pytest.fixture
def two_gpus(monkeypatch):
    """A machine with two 80 GiB GPUs, 20 GiB of each in use."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "Fake H100")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (60 * 2**30, 80 * 2**30))


def test_without_cuda_the_cpu_is_all_there_is(no_cuda):
    assert dev.gpu_count() == 0
    assert dev.device_choices() == ["auto", "cpu"]
    assert dev.resolve_device("auto") == torch.device("cpu")
    cores = dev.max_processes(torch.device("cpu"))
    for name in ("auto", "cuda:1"):  # a device this machine lacks: counted as the CPU
        assert dev.processes_note(name) == (f"N: 1 to {cores}, one process per CPU core (for trying it out), "
                                            "DDP or FSDP through torchrun")
    with pytest.raises(ConfigError, match="no CUDA device"):
        dev.resolve_device("cuda:0")


def test_with_two_gpus_each_is_offered(two_gpus):
    assert dev.gpu_count() == 2 and dev.max_processes(torch.device("cuda", 0)) == 2
    assert dev.device_choices() == ["auto", "cpu", "cuda:0", "cuda:1"]
    assert dev.resolve_device("auto") == torch.device("cuda", 0)
    assert dev.processes_note("auto") == "N: 1 to 2, one process per GPU, DDP or FSDP through torchrun"
    with pytest.raises(ConfigError, match="cuda:0 to cuda:1"):
        dev.resolve_device("cuda:2")


def test_autocast_failing_says_its_error_in_one_line(monkeypatch):
    def fails(*args, **kwargs):
        raise RuntimeError("no kernel for this dtype\n  the rest of a long trace")

    monkeypatch.setattr(torch, "autocast", fails)
    assert dev.autocast_works(torch.device("cpu"), torch.bfloat16) == (False, "RuntimeError: no kernel for this dtype")

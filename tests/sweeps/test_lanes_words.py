"""How the Sweeps page says a sweep's runs will train: one at a time on the CPU or the GPU, one per GPU
at a time on several; this machine's GPUs counted by train.device when not given."""

import torch

from gaccum_core.sweeps.devices import lanes_words


def test_the_words_follow_the_gpu_count():
    assert lanes_words(0) == "one run at a time on the CPU"
    assert lanes_words(1) == "one run at a time on the GPU"
    assert lanes_words(4) == "one run per GPU at a time on the 4 GPUs"


def test_this_machines_gpus_are_asked_only_where_cuda_is(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1 / 0)  # never asked without CUDA
    assert lanes_words() == "one run at a time on the CPU"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert lanes_words() == "one run per GPU at a time on the 2 GPUs"

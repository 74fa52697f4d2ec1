"""Choosing the device once, and what it can do."""

from __future__ import annotations

import psutil
import torch

from gaccum_core.config import ConfigError


def resolve_device(name: str) -> torch.device:
    """Turn a config device (auto | cpu | cuda | cuda:N) into a concrete torch.device."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError("device", name, "cpu or auto: this machine has no CUDA device")
    index = int(name.split(":")[1]) if ":" in name else torch.cuda.current_device()
    count = torch.cuda.device_count()
    if index >= count:
        raise ConfigError("device", name, f"cuda:0 to cuda:{count - 1}")
    return torch.device("cuda", index)


def device_name(device: torch.device) -> str:
    """A human name: the GPU's model, or 'CPU'."""
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} ({device})"
    return "CPU"


def memory_info(device: torch.device) -> tuple[int, int]:
    """(free, total) bytes on the device; host RAM for the CPU."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)
    vm = psutil.virtual_memory()
    return vm.available, vm.total


def autocast_works(device: torch.device, dtype: torch.dtype) -> tuple[bool, str]:
    """Whether a small matmul runs under autocast(dtype) here, and why not when it fails."""
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        return False, "this GPU has no bfloat16 support"
    try:
        a = torch.ones(8, 8, device=device)
        with torch.autocast(device_type=device.type, dtype=dtype):
            out = a @ a
        return out.dtype == dtype, f"autocast produced {out.dtype}"
    except (RuntimeError, AssertionError) as exc:
        return False, str(exc).splitlines()[0]

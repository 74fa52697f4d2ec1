"""Memory readings: the CUDA allocator on a GPU, the process's resident memory on the CPU,
and the bytes autograd saves for backward (activations), measured the same way on every device."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psutil
import torch

MB = 1024 * 1024
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _read_hwm_bytes() -> int | None:
    """VmHWM: the peak resident set since the last reset (Linux only)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_hwm() -> bool:
    """Reset VmHWM to the current RSS; writing 5 to clear_refs does exactly that (Linux ≥ 4.0)."""
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


class MemoryProbe:
    """Reads allocated / reserved / peak memory once per optimizer step."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._process = psutil.Process()
        self._hwm_resettable = device.type == "cpu" and _reset_hwm() and _read_hwm_bytes() is not None
        self._rss_peak = 0

    def start_step(self) -> None:
        """Begin a new peak-measurement interval."""
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        elif self._hwm_resettable:
            _reset_hwm()
        else:
            self._rss_peak = self._process.memory_info().rss

    def read(self) -> dict[str, float | None]:
        """mem_allocated_mb, mem_reserved_mb and mem_peak_mb (peak since start_step)."""
        if self.device.type == "cuda":
            return {
                "mem_allocated_mb": torch.cuda.memory_allocated(self.device) / MB,
                "mem_reserved_mb": torch.cuda.memory_reserved(self.device) / MB,
                "mem_peak_mb": torch.cuda.max_memory_allocated(self.device) / MB,
            }
        rss = self._process.memory_info().rss
        peak = _read_hwm_bytes() if self._hwm_resettable else max(self._rss_peak, rss)
        # The CPU has no caching allocator: "reserved" has no meaning there and stays empty.
        return {"mem_allocated_mb": rss / MB, "mem_reserved_mb": None, "mem_peak_mb": max(peak or 0, rss) / MB}


class ActivationMeter:
    """Counts the bytes autograd saves for backward during a forward pass, parameters excluded."""

    def __init__(self, params: list[torch.nn.Parameter]) -> None:
        self._param_storages = {p.untyped_storage().data_ptr() for p in params}
        self.bytes = 0

    @contextmanager
    def measure(self) -> Iterator["ActivationMeter"]:
        """Within this context, every tensor saved for backward is counted once per storage."""
        seen: set[int] = set()
        self.bytes = 0

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if key not in seen and key not in self._param_storages and key != 0:
                seen.add(key)
                self.bytes += storage.nbytes()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            yield self

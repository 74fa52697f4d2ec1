"""Memory readings: the CUDA allocator on a GPU, the process's resident memory on the CPU,
and the bytes autograd saves for backward (activations), measured the same way on every device.
Also the one place that releases cached memory and recognises an out-of-memory error."""

from __future__ import annotations

import gc
import os
import time
import weakref
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator, Protocol

import torch

MB = 1024 * 1024


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether exc is an allocator running out of memory, on any device."""
    # The CPU allocator raises a plain RuntimeError where CUDA raises torch.OutOfMemoryError.
    return isinstance(exc, torch.OutOfMemoryError) or "can't allocate memory" in str(exc)


def clear_cache(device: torch.device) -> float:
    """gc.collect() and, on CUDA, torch.cuda.empty_cache(); returns the seconds they took, queued GPU work excluded."""
    if device.type == "cuda":
        # empty_cache's cudaFree waits for every queued kernel: without this, the backward still running
        # on the GPU would be counted as clearing.
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return time.perf_counter() - start


class _ProcMemory:
    """Linux's VmRSS and VmHWM (peak RSS since the last reset), read through kept-open files:
    a pread is a quarter of the cost of opening /proc/self/status on every step."""

    def __init__(self) -> None:
        self._status = os.open("/proc/self/status", os.O_RDONLY)
        weakref.finalize(self, os.close, self._status)
        self._clear_refs = os.open("/proc/self/clear_refs", os.O_WRONLY)
        weakref.finalize(self, os.close, self._clear_refs)
        self.reset_peak()
        self.read()

    def reset_peak(self) -> None:
        """Set VmHWM to the current RSS: writing 5 to clear_refs does exactly that (Linux ≥ 4.0)."""
        os.write(self._clear_refs, b"5")

    def read(self) -> tuple[int, int]:
        """(rss, peak) in bytes."""
        values = {}
        for line in os.pread(self._status, 8192, 0).split(b"\n"):
            if line.startswith((b"VmRSS:", b"VmHWM:")):
                values[line[:5]] = int(line.split()[1]) * 1024
        return values[b"VmRSS"], values[b"VmHWM"]


def _psutil():  # noqa: ANN202 - the module
    """psutil, imported where it is needed (a CPU without /proc): a GPU image may not carry it."""
    import psutil  # noqa: PLC0415

    return psutil


def _proc_memory() -> _ProcMemory | None:
    try:
        return _ProcMemory()
    except (OSError, KeyError):
        return None  # not Linux, or a kernel without these files: fall back to sampled RSS


class MemoryProbe:
    """Reads allocated / reserved / peak memory once per optimizer step."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._proc = _proc_memory() if device.type == "cpu" else None
        self._process = None if self._proc is not None or device.type != "cpu" else _psutil().Process()
        self._rss_at_start = 0

    def start_step(self) -> None:
        """Begin a new peak-measurement interval."""
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        elif self._proc is not None:
            self._proc.reset_peak()
        else:
            self._rss_at_start = self._process.memory_info().rss

    def read(self) -> dict[str, float | None]:
        """mem_allocated_mb, mem_reserved_mb and mem_peak_mb (peak since start_step)."""
        if self.device.type == "cuda":
            return {
                "mem_allocated_mb": torch.cuda.memory_allocated(self.device) / MB,
                "mem_reserved_mb": torch.cuda.memory_reserved(self.device) / MB,
                "mem_peak_mb": torch.cuda.max_memory_allocated(self.device) / MB,
            }
        if self._proc is not None:
            rss, peak = self._proc.read()
        else:
            rss = self._process.memory_info().rss
            peak = max(self._rss_at_start, rss)
        # The CPU has no caching allocator: "reserved" has no meaning there and stays empty.
        return {"mem_allocated_mb": rss / MB, "mem_reserved_mb": None, "mem_peak_mb": max(peak, rss) / MB}


class _Saved:
    """What the pack hook hands autograd: the tensor, and a finalizer that fires when the graph drops it."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


class SavedBytesPeak:
    """The peak of bytes autograd holds for backward at once, over any number of forward and backward
    passes (parameters excluded): one micro-batch's activations, and a loop that keeps a graph alive
    past its backward shows here as several. A checkpointed block (train/activation.py) holds only its
    input in the forward, counted here as saved; its recomputation during backward is counted through
    `recomputes`: the block's own saved bytes on top of what is held when it recomputes."""

    def __init__(self, params: list[torch.nn.Parameter]) -> None:
        self._param_storages = {_local(p).untyped_storage().data_ptr() for p in params}
        self._live: dict[int, list[int]] = {}  # storage pointer -> [holders alive, bytes]
        self.current = 0
        self.peak = 0

    def _release(self, key: int) -> None:
        entry = self._live[key]
        entry[0] -= 1
        if entry[0] == 0:
            self.current -= entry[1]
            del self._live[key]

    def _pack(self, tensor: torch.Tensor) -> object:
        key = tensor.untyped_storage().data_ptr()
        # FSDP's gathered weights are parameters too (registered while their unit computes), and views of them.
        if key == 0 or key in self._param_storages or isinstance(tensor, torch.nn.Parameter) \
                or isinstance(tensor._base, torch.nn.Parameter):
            return tensor
        saved = _Saved(tensor)
        entry = self._live.setdefault(key, [0, tensor.untyped_storage().nbytes()])
        if entry[0] == 0:
            self.current += entry[1]
            self.peak = max(self.peak, self.current)
        entry[0] += 1
        weakref.finalize(saved, self._release, key)
        return saved

    @contextmanager
    def measure(self) -> Iterator["SavedBytesPeak"]:
        """Within this context, count every tensor saved for backward while autograd holds it; the peak
        starts again from what is held now (the engine measures each new micro-batch size afresh)."""
        self.peak = self.current
        unpack = lambda packed: packed.tensor if isinstance(packed, _Saved) else packed  # noqa: E731
        token = _COUNTING.set(self)
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, unpack):
                yield self
        finally:
            _COUNTING.reset(token)

    def recomputes(self, forward: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Callable[[], None]:
        """For a checkpointed block about to run forward(*args, **kwargs) under this meter: what to call when
        its recomputation starts. Measures the bytes the forward's graph holds when not checkpointed (run once
        more, under a forked RNG, then dropped); the call counts them on top of what is held at that moment,
        as the recomputed activations are until the block's backward has used them: an input's storage only
        where nothing holds it then (the checkpoint keeps the positional inputs already, not the keywords)."""
        inputs = {t.untyped_storage().data_ptr() for t in _tensors((*args, *kwargs.values()))}
        block = SavedBytesPeak([])
        block._param_storages = self._param_storages
        device = next((t.device for t in _tensors((*args, *kwargs.values())) if t.device.type != "cpu"), None)
        with torch.random.fork_rng(devices=[] if device is None else [device],
                                   device_type="cuda" if device is None else device.type), block.measure():
            output = forward(*args, **kwargs)
            # What the output's graph holds: a part no output depends on is gone already.
            shared = {key: entry[1] for key, entry in block._live.items() if key in inputs}
            own = block.current - sum(shared.values())
        del output  # and with it the graph and its saved tensors

        def recomputing() -> None:
            again = sum(size for key, size in shared.items() if key not in self._live)
            self.peak = max(self.peak, self.current + own + again)
        return recomputing


_COUNTING: ContextVar[SavedBytesPeak | None] = ContextVar("gaccum_saved_bytes_meter", default=None)


def counting_meter() -> SavedBytesPeak | None:
    """The SavedBytesPeak measuring the forward running now in this thread, if any (innermost first)."""
    return _COUNTING.get()


def _tensors(values: Any) -> Iterator[torch.Tensor]:
    """The tensors among values, and in their tuples and lists (a Hugging Face layer's position_embeddings)."""
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (tuple, list)):
            yield from _tensors(value)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of a sharded (FSDP) tensor: what it holds in memory."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def tensor_bytes(tensors: Iterator[torch.Tensor] | list[torch.Tensor]) -> int:
    """Bytes of these tensors' elements this process holds (a sharded tensor's own part only)."""
    return sum(t.numel() * t.element_size() for t in map(_local, tensors))


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer's state tensors (momentum buffers, Adam's moments)."""
    return tensor_bytes([v for state in optimizer.state.values() for v in state.values()
                         if isinstance(v, torch.Tensor)])


class Trains(Protocol):
    """What training memory is counted from: a model and its optimizer (an Engine has both)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer


class TrainingMemory:
    """The training memory the planner counts: weights (parameters and buffers) + gradients + optimizer
    state + the bytes autograd saves for backward. The parts that do not change during a run are counted
    once, the optimizer state again only when it gains entries (it appears at the first step), so a step's
    row costs no walk over the tensors."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self._optimizer = optimizer
        self.weights_mb = tensor_bytes([*model.parameters(), *model.buffers()]) / MB
        # .grad has each trained parameter's shape and dtype: counted whole, as the planner budgets it.
        self.gradients_mb = tensor_bytes([p for g in optimizer.param_groups for p in g["params"]]) / MB
        self._entries = -1
        self._optimizer_mb = 0.0

    def optimizer_mb(self) -> float:
        """The optimizer's state in MB, counted again only when it holds more parameters' state."""
        entries = len(self._optimizer.state)
        if entries != self._entries:
            self._entries, self._optimizer_mb = entries, optimizer_state_bytes(self._optimizer) / MB
        return self._optimizer_mb

    def parts(self, saved_peak: int) -> dict[str, float]:
        """The counted parts in MB (activations: saved_peak bytes) and their sum, counted_mb."""
        parts = {"weights_mb": self.weights_mb, "gradients_mb": self.gradients_mb,
                 "optimizer_mb": self.optimizer_mb(), "activations_mb": saved_peak / MB}
        return {**parts, "counted_mb": sum(parts.values())}

    def row(self, saved_peak: int, grad_kept_mb: float | None = None, gathered_mb: float = 0.0) -> dict[str, float]:
        """The parts as a step row's columns: weights_mb, gradients_mb, optimizer_mb, train_mem_mb, and
        grad_kept_mb, the gradient memory held between micro-batches. A sharded model measures the last
        (its gradients) and the weights it keeps gathered; otherwise .grad is held whole."""
        parts = self.parts(saved_peak)
        weights = parts["weights_mb"] + gathered_mb
        gradients = parts["gradients_mb"] if grad_kept_mb is None else grad_kept_mb
        total = weights + gradients + parts["optimizer_mb"] + parts["activations_mb"]
        return {"weights_mb": weights, "gradients_mb": gradients, "optimizer_mb": parts["optimizer_mb"],
                "train_mem_mb": total, "grad_kept_mb": gradients}


def training_memory(trained: Trains, saved_peak: int) -> dict[str, float]:
    """The counted parts of training memory in MB, and their sum (counted_mb): what the planner budgets
    and what each step row of a run reports as train_mem_mb."""
    return TrainingMemory(trained.model, trained.optimizer).parts(saved_peak)

"""FSDP2 sharding for accumulation: fully_shard on each block and on the root, when to reduce-scatter, counted
collectives, and the gradient memory a rank keeps between micro-batches.

Weights, gradients and optimizer state are sharded over the N ranks (each holds 1/N); a block's weights are
all-gathered for its forward and backward. FSDP averages the reduce-scattered gradients over the ranks, as DDP
does, so the engine's weighting (each rank divides its summed loss by 1/N of the window's count,
accumulation.micro_batch_divisors) undoes it on every unit at once: no gradient divide factor is set, which would
need PREMUL_SUM (absent from gloo) and is not recursive. The accumulation trade-off:
- fsdp_sync every: reduce-scatter after every micro-batch; each rank keeps only its 1/N of the fp32 gradient.
- fsdp_sync last: gradient sync off until the window's last micro-batch (k times fewer reduce-scatters), but each
  rank accumulates the whole unsharded fp32 gradient in between.
- fsdp_reshard_after_backward off: a block's gathered weights stay between micro-batches (fewer all-gathers);
  the window's last backward always reshards, or the sharded .grad would stay unset until an explicit reshard.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch
from torch import nn

from gaccum_core.config import RunConfig
from gaccum_core.train.distributed import CollectiveCount
from gaccum_core.train.precision import DTYPES

MB = 1024 * 1024


class _Counted:
    """FSDP's own all-gather or reduce-scatter (DefaultAllGather, DefaultReduceScatter), counted per call:
    bytes are the unsharded side of the collective (the gathered output, the whole gradient sent)."""

    def __init__(self, inner: Any, count: CollectiveCount, kind: str) -> None:
        self.inner, self.count, self.kind = inner, count, kind

    def allocate(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """The buffer FSDP communicates through, as the default collective allocates it."""
        return self.inner.allocate(*args, **kwargs)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        whole = output_tensor if self.kind == "all_gather" else input_tensor
        calls, sent = f"{self.kind}_calls", f"{self.kind}_bytes"
        setattr(self.count, calls, getattr(self.count, calls) + 1)
        setattr(self.count, sent, getattr(self.count, sent) + whole.numel() * whole.element_size())
        return self.inner(output_tensor, input_tensor, *args, **kwargs)


def blocks(model: nn.Module) -> list[nn.Module]:
    """The modules sharded one by one before the root: a transformer's blocks (gpt's, an hf: model's decoder
    layers by its _no_split_modules), else each top-level child that holds parameters."""
    if isinstance(model, nn.Sequential) and isinstance(getattr(model, "net", None), nn.Module):
        return blocks(model.net)  # an image model behind its input adapter
    gpt_blocks = getattr(model, "blocks", None)
    if isinstance(gpt_blocks, nn.ModuleList):
        return list(gpt_blocks)
    inner = getattr(model, "model", None)
    layer_names = set(getattr(inner, "_no_split_modules", None) or ())
    if layer_names:
        return [m for m in inner.modules() if type(m).__name__ in layer_names]
    return [child for child in model.children() if any(True for _ in child.parameters())]


def param_dtype(config: RunConfig) -> torch.dtype | None:
    """The dtype FSDP gathers weights in: bf16/fp16 under AMP (reductions stay fp32), None (fp32) without."""
    return DTYPES.get(config.amp)


class Sharded:
    """A model sharded with FSDP2 (fully_shard on each block, then the root), its collectives counted."""

    def __init__(self, model: nn.Module, config: RunConfig) -> None:
        # Imported here: torch.distributed.fsdp costs 0.7 s, which runs without sharding need not pay.
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter

        policy = MixedPrecisionPolicy(param_dtype=param_dtype(config), reduce_dtype=torch.float32)
        self.units: list[Any] = []  # FSDPModules
        for block in blocks(model):
            fully_shard(block, mp_policy=policy)
            self.units.append(block)
        fully_shard(model, mp_policy=policy)
        self.root = self.module = model
        self.units.append(self.root)
        if callable(getattr(model, "generate", None)):
            register_fsdp_forward_method(model, "generate")  # sample text gathers weights like forward
        self.count = CollectiveCount()
        for unit in self.units:  # not recursive: every unit gets the counting collectives
            unit.set_custom_all_gather(_Counted(DefaultAllGather(), self.count, "all_gather"))
            unit.set_custom_reduce_scatter(_Counted(DefaultReduceScatter(), self.count, "reduce_scatter"))
        self.sync_every = config.fsdp_sync == "every"
        self.keep_gathered = config.fsdp_reshard_after_backward == "off"
        self.grad_kept_bytes = self.gathered_bytes = 0  # the most held after a micro-batch of the current step

    def reset(self) -> None:
        """Start a new optimizer step's counts."""
        self.count.reset()
        self.grad_kept_bytes = self.gathered_bytes = 0

    @contextmanager
    def sync(self, ends_window: bool) -> Iterator[None]:
        """Around one micro-batch's forward and backward: reduce-scatter now or later, reshard or keep."""
        self.root.set_requires_gradient_sync(ends_window or self.sync_every)
        self.root.set_reshard_after_backward(ends_window or not self.keep_gathered)
        yield
        grads, gathered = kept_bytes(self.units)
        self.grad_kept_bytes = max(self.grad_kept_bytes, grads)
        self.gathered_bytes = max(self.gathered_bytes, gathered)

    def memory(self) -> dict[str, float]:
        """grad_kept_mb: the most gradient memory this rank held after a micro-batch of the step;
        gathered_mb: the weights it keeps gathered between micro-batches (reshard after backward off)."""
        return {"grad_kept_mb": self.grad_kept_bytes / MB, "gathered_mb": self.gathered_bytes / MB}


def _fsdp_params(unit: Any) -> list[Any]:
    # FSDP2 keeps each unit's parameters in its parameter groups (private, stable since torch 2.4).
    return [p for group in unit._get_fsdp_state()._fsdp_param_groups for p in group.fsdp_params]


def _nbytes(tensor: torch.Tensor | None) -> int:
    if tensor is None:
        return 0
    tensor = local(tensor)
    return tensor.numel() * tensor.element_size()


def kept_bytes(units: list[Any]) -> tuple[int, int]:
    """(gradient, unsharded weight) bytes a rank holds now: sharded .grad, the unsharded gradient accumulated
    while sync is off (in the reduce dtype), and weights left gathered."""
    grads = gathered = 0
    for unit in units:
        for param in _fsdp_params(unit):
            grads += _nbytes(param.sharded_param.grad) + _nbytes(param.unsharded_accumulated_grad)
            unsharded = getattr(param, "_unsharded_param", None)
            if unsharded is not None:
                grads += _nbytes(unsharded.grad)
                if unsharded.untyped_storage().size() > 0:  # freed storage reads size 0
                    gathered += _nbytes(unsharded)
    return grads, gathered


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of a sharded tensor (a DTensor's to_local()), the tensor itself when not sharded."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor

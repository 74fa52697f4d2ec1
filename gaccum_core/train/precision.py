"""Mixed precision: autocast for the forward pass and a GradScaler that is a no-op when disabled.

fp16 = autocast(float16) + GradScaler; bf16 = autocast(bfloat16), no scaler (its range is fp32's);
off = neither. The loop calls the same methods in every mode, so it has no precision branches.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}  # autocast's dtype for each amp setting but off
_NO_AUTOCAST = nullcontext()  # reusable: entering it does nothing


@dataclass(frozen=True)
class StepOutcome:
    """What one optimizer step did."""

    grad_norm: torch.Tensor  # unscaled, before clipping; still on the device
    scale: float | None      # the loss scale used for this step's backward passes
    skipped: bool            # the scaler found inf/NaN gradients and skipped optimizer.step()


class Precision:
    """Autocast + GradScaler for one device, configured once per run."""

    def __init__(self, amp: str, device: torch.device, init_scale: float = 2.0**16,
                 growth_interval: int = 2000) -> None:
        self.device_type = device.type
        self.dtype = DTYPES.get(amp)
        self.scaler = torch.amp.GradScaler(
            device.type, init_scale=init_scale, growth_interval=growth_interval, enabled=amp == "fp16"
        )

    @property
    def uses_scaler(self) -> bool:
        """True when losses are scaled (fp16)."""
        return self.scaler.is_enabled()

    def autocast(self) -> AbstractContextManager:
        """The context for forward pass and loss (a free nullcontext in fp32)."""
        if self.dtype is None:
            return _NO_AUTOCAST
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """Backward on the (scaled, when fp16) loss; gradients accumulate in .grad."""
        self.scaler.scale(loss).backward()

    def step(self, optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], grad_clip: float) -> StepOutcome:
        """Unscale (when clipping), clip, step and update the scale: call once per window."""
        scale = self.scaler.get_scale() if self.uses_scaler else None
        if grad_clip > 0:
            self.scaler.unscale_(optimizer)
            grad_norm = _whole(torch.nn.utils.clip_grad_norm_(params, grad_clip))
        else:
            # The norm of scaled gradients divided by the scale: unscaled without touching .grad.
            grad_norm = _total_norm([p.grad for p in params if p.grad is not None])
            if scale is not None:
                grad_norm = grad_norm / scale
        self.scaler.step(optimizer)
        self.scaler.update()
        # update() backs the scale off exactly when it found inf/NaN, and only then lowers it.
        skipped = scale is not None and self.scaler.get_scale() < scale
        return StepOutcome(grad_norm, scale, skipped)

    def state_dict(self) -> dict[str, Any]:
        """The GradScaler's state, for a checkpoint (empty when no scaler is used)."""
        return self.scaler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put a checkpoint's GradScaler state back."""
        self.scaler.load_state_dict(state)


def _whole(norm: torch.Tensor) -> torch.Tensor:
    """A norm of sharded (FSDP) gradients holds each rank's part until reduced: the whole norm, on every rank."""
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


def _total_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of all gradients together, as clip_grad_norm_ computes it.

    get_total_norm's per-call grouping by device and dtype costs more than the norms of a small
    model; a model's parameters live on one device, so one fused _foreach_norm does the same.
    """
    if not grads:
        return torch.zeros(())
    if len({(g.device, g.dtype, type(g)) for g in grads}) > 1 or hasattr(grads[0], "full_tensor"):
        return _whole(torch.nn.utils.get_total_norm(grads))
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))

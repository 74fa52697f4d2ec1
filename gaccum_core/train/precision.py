"""Mixed precision: autocast for the forward pass and a GradScaler that is a no-op when disabled.

fp16 = autocast(float16) + GradScaler; bf16 = autocast(bfloat16), no scaler (its range is fp32's);
off = neither, in true fp32 on CUDA: TF32 off for the forward and backward passes (true_fp32). The loop calls
the same methods in every mode, so it has no precision branches.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}  # autocast's dtype for each amp setting but off
_NO_AUTOCAST = nullcontext()  # reusable: entering it does nothing
# The fp32 operations CUDA may run in TF32, each with its own switch in torch's fp32_precision API (torch ≥ 2.9).
_TF32_OPS = (torch.backends.cuda.matmul, torch.backends.cudnn.conv, torch.backends.cudnn.rnn)


@contextmanager
def true_fp32(device: torch.device) -> Iterator[None]:
    """Within: fp32 matmuls, convolutions and RNNs in IEEE fp32 on CUDA, not TF32 (cuDNN convolutions default to
    TF32 on Ampere and newer, and may pick another algorithm for b than for b·k); every flag as it was after,
    even when the body raises. Off CUDA it changes nothing."""
    if device.type != "cuda":
        yield
        return
    saved = _tf32_flags()
    try:
        # The legacy switches first: they turn torch's older view of the flags off too, which torch still reads
        # (inductor's convolution templates read cudnn.allow_tf32, which raises when only the new API changed).
        torch.set_float32_matmul_precision("highest")  # cuBLAS's and oneDNN's matmuls in IEEE fp32
        torch.backends.cudnn.allow_tf32 = False
        for op in _TF32_OPS:
            op.fp32_precision = "ieee"
        yield
    finally:
        _restore_tf32_flags(saved)


def _legacy(read: Callable[[], Any]) -> Any:
    """A legacy TF32 flag, or None where torch refuses to read it (the two APIs were already set apart)."""
    try:
        return read()
    except RuntimeError:
        return None


def _tf32_flags() -> tuple:
    """The flags true_fp32 changes, as (legacy matmul precision, legacy cuDNN switch, each fp32_precision)."""
    return (_legacy(torch.get_float32_matmul_precision), _legacy(lambda: torch.backends.cudnn.allow_tf32),
            torch.backends.mkldnn.matmul.fp32_precision, *(op.fp32_precision for op in _TF32_OPS))


def _restore_tf32_flags(saved: tuple) -> None:
    """Put back the flags _tf32_flags read: the legacy ones first, as their setters also write fp32_precision."""
    matmul, cudnn, mkldnn_matmul, *precisions = saved
    if cudnn is not None:
        torch.backends.cudnn.allow_tf32 = cudnn
    if matmul is not None:
        torch.set_float32_matmul_precision(matmul)  # also writes mkldnn's matmul precision, put back next
    torch.backends.mkldnn.matmul.fp32_precision = mkldnn_matmul
    for op, precision in zip(_TF32_OPS, precisions):
        op.fp32_precision = precision


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
        # fp32 on CUDA is IEEE fp32, as the accumulation oracle needs: b and b·k may get different TF32 kernels.
        self._fp32 = (lambda: true_fp32(device)) if self.dtype is None and device.type == "cuda" else None
        self.scaler = torch.amp.GradScaler(
            device.type, init_scale=init_scale, growth_interval=growth_interval, enabled=amp == "fp16"
        )

    @property
    def uses_scaler(self) -> bool:
        """True when losses are scaled (fp16)."""
        return self.scaler.is_enabled()

    def autocast(self) -> AbstractContextManager:
        """The context for forward pass and loss (in fp32 a free nullcontext, or true_fp32 on CUDA)."""
        if self.dtype is None:
            return _NO_AUTOCAST if self._fp32 is None else self._fp32()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """Backward on the (scaled, when fp16) loss; gradients accumulate in .grad (true fp32 on CUDA in fp32)."""
        with _NO_AUTOCAST if self._fp32 is None else self._fp32():
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

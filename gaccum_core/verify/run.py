"""Your window run on one split, from the same start every time: weights, buffers and random state restored, .grad
set to None, and the window's gradient read back as one flat vector."""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
import torch

from gaccum_core.verify.loop import Batch, VerifyError, split_batch
from gaccum_core.verify.splits import Split, describe
from gaccum_core.words import first_line

AMP_OF_DTYPE = {torch.float16: "fp16", torch.bfloat16: "bf16"}


class VerifyCancelled(Exception):
    """The caller's cancel check said stop."""


class Bench:
    """The model, its batch and window, and the state every run starts from."""

    def __init__(self, window: Callable[..., Any], model: torch.nn.Module, batch: Batch, fixed_k: int | None) -> None:
        self.window, self.model, self.batch, self.fixed_k = window, model, batch, fixed_k
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.start = {name: t.detach().clone() for name, t in _tensors(model)}
        self.rng = _rng_state()
        self.amp = AMP_OF_DTYPE.get(min((p.dtype for p in self.params), key=lambda d: torch.finfo(d).bits)
                                    if self.params else torch.float32, "off")

    def restart(self, reset_rng: bool = True) -> None:
        """Weights and buffers as they started, .grad None, and (unless told not to) the random state too."""
        with torch.no_grad():
            for name, tensor in _tensors(self.model):
                tensor.copy_(self.start[name])
        for p in self.model.parameters():
            p.grad = None
        if reset_rng:
            _set_rng_state(self.rng)

    def gradient(self, split: Split, start: int = 0, reset_rng: bool = True) -> torch.Tensor:
        """The window's flat float32 gradient on this split of the batch's samples from `start`."""
        self.restart(reset_rng)
        micro = split_batch(self.batch, (start, *split, len_of(self.batch) - start - sum(split)))[1:-1]
        arguments = {} if self.fixed_k is None else {"fixed_k": self.fixed_k}
        with _autocast_seen(self.model) as seen:
            try:
                self.window(self.model, micro, **arguments)
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - your code's error, said in one line
                raise VerifyError(f"window raised {first_line(exc)} on the split {describe(split)}") from None
        if seen:
            self.amp = seen[-1]
        return self.flat(f"window on the split {describe(split)}")

    def objective_gradient(self, objective: Callable[[torch.nn.Module, Batch], torch.Tensor]) -> torch.Tensor:
        """The gradient of objective(model, whole batch), from the same start."""
        self.restart()
        try:
            objective(self.model, self.batch).backward()
        except (Exception, SystemExit) as exc:  # noqa: BLE001
            raise VerifyError(f"objective raised {first_line(exc)}") from None
        return self.flat("objective")

    def flat(self, what: str) -> torch.Tensor:
        """The parameters' .grad as one float32 vector in host memory (the device's is the model's), zeros where
        None; VerifyError when there is none at all."""
        if all(p.grad is None for p in self.params):
            raise VerifyError(f"{what} left no .grad on the model's parameters: a backward per micro-batch is "
                              "allowed, and no zero_grad or optimizer step")
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float().cpu()
                          for p in self.params])
        if not bool(torch.isfinite(flat).all()):
            raise VerifyError(f"{what} gave gradients that are not finite (inf/NaN): finite ones are compared")
        return flat


def len_of(batch: Batch) -> int:
    """The samples in a batch verify has checked (batch_size)."""
    return len(batch) if isinstance(batch, list) else len(next(iter(batch.values())))


def _tensors(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    yield from model.named_parameters()
    yield from (("buffer:" + name, b) for name, b in model.named_buffers())


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate(),
                             "numpy": np.random.get_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


@contextmanager
def _autocast_seen(model: torch.nn.Module) -> Iterator[list[str]]:
    """The reduced precisions autocast was on in while the model's forward ran (fp16, bf16), in a list."""
    seen: list[str] = []

    def look(module: torch.nn.Module, _: Any) -> None:
        for device in ("cuda", "cpu"):
            if torch.is_autocast_enabled(device):
                amp = AMP_OF_DTYPE.get(torch.get_autocast_dtype(device))
                if amp and amp not in seen:
                    seen.append(amp)

    handle = model.register_forward_pre_hook(look)
    try:
        yield seen
    finally:
        handle.remove()

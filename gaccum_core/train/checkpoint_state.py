"""What a checkpoint holds of a run's progress, captured from the live objects and put back into them.

Everything a run's future depends on, so that a resumed run equals the uninterrupted one: besides the
model and optimizer, the LR schedule, GradScaler, every RNG the run uses (the run's own torch CPU and CUDA
generators, seeded from its seed and rank, which dropout draws from: captured and restored within
seeding.RunRng.active; Python's `random`; the sample order has its own generator fixed by (seed, epoch), and
NumPy is not used; a multi-process run's checkpoint adds "rngs", each rank's), the position (epoch, window, micro-batches of that window done), the counters, and for a run
stopped mid-window the gradients accumulated so far with those micro-batches' losses. Plain tensors,
numbers, strings and lists only, so it loads with torch.load(weights_only=True). Where it is written,
read and checked: gaccum_core.train.checkpoint.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

FORMAT = 1  # checkpoint.pt's layout; one this gaccum does not read is refused


@dataclass
class Counters:
    """Running totals across optimizer steps."""

    step: int = 0
    samples_seen: int = 0
    skipped_total: int = 0
    last_eval_step: int = -1
    tokens_seen: int = 0  # target tokens of a language run

    def count_step(self, samples: int, tokens: int, skipped: bool) -> None:
        """Add one optimizer step over these samples (and target tokens: 0 for images)."""
        self.step += 1
        self.samples_seen += samples
        self.tokens_seen += tokens
        self.skipped_total += int(skipped)


@dataclass(frozen=True)
class Position:
    """Where training goes on: epoch, window of that epoch, and micro-batches of it already in .grad."""

    epoch: int = 0
    window: int = 0
    micro: int = 0


@dataclass
class TrainingState:
    """What a checkpoint holds beyond the model and optimization objects."""

    position: Position = field(default_factory=Position)
    counters: Counters = field(default_factory=Counters)
    in_flight: list[torch.Tensor] = field(default_factory=list)  # losses of the window's micro-batches done
    wall_time_s: float = 0.0  # training time so far (the pause between segments not counted)


def _rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": _python_rng()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _python_rng() -> list[Any]:
    version, internal, gauss = random.getstate()
    return [version, list(internal), gauss]


def _restore_rng(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def capture(model: torch.nn.Module, opt: Any, params: list[torch.nn.Parameter], training: TrainingState,
            config: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """A checkpoint of the run as it is now (the in-flight gradients are copied off .grad)."""
    return {**capture_progress(opt, params, training, config, device),
            "model": model.state_dict(), "optimizer": opt.optimizer.state_dict()}


def capture_progress(opt: Any, params: list[torch.nn.Parameter], training: TrainingState, config: dict[str, Any],
                     device: torch.device) -> dict[str, Any]:
    """Everything a checkpoint holds but the model's and optimizer's tensors (which a sharded run writes apart)."""
    return {
        "format": FORMAT, "torch_version": str(torch.__version__), "config": config,
        "scheduler": opt.scheduler.state_dict() if opt.scheduler is not None else None,
        "scaler": opt.precision.state_dict(), "rng": _rng_state(device),
        "position": asdict(training.position), "counters": asdict(training.counters),
        "grads": [None if p.grad is None else p.grad.detach().clone() for p in params],
        "in_flight": [loss.detach().clone() for loss in training.in_flight],
        "wall_time_s": training.wall_time_s,
    }


def restore(state: dict[str, Any], model: torch.nn.Module, opt: Any, params: list[torch.nn.Parameter],
            device: torch.device) -> TrainingState:
    """Put a checkpoint's model, optimizer, schedule, scaler, RNGs and gradients back; its training state."""
    model.load_state_dict(state["model"])
    opt.optimizer.load_state_dict(state["optimizer"])
    return restore_progress(state, opt, params, device)


def restore_progress(state: dict[str, Any], opt: Any, params: list[torch.nn.Parameter],
                     device: torch.device) -> TrainingState:
    """Put a checkpoint's schedule, scaler, RNGs and gradients back (not the model and optimizer); its training state."""
    if opt.scheduler is not None and state["scheduler"] is not None:
        opt.scheduler.load_state_dict(state["scheduler"])
    if state["scaler"]:
        opt.precision.load_state_dict(state["scaler"])
    for param, grad in zip(params, state["grads"]):
        param.grad = None if grad is None else grad.to(device)
    _restore_rng(state["rng"], device)
    return TrainingState(Position(**state["position"]), Counters(**state["counters"]),
                         [loss.to(device) for loss in state["in_flight"]], float(state["wall_time_s"]))

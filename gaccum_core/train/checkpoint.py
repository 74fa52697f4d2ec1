"""checkpoint.pt: everything a run's future depends on, so that a resumed run equals the uninterrupted one.

Model, optimizer, LR schedule, GradScaler, every RNG the run uses (torch's CPU and CUDA generators
and Python's `random`; the sample order has its own generator fixed by (seed, epoch), and NumPy is
not used), the position (epoch, window, micro-batches of that window done), the counters, and for a
run stopped mid-window the gradients accumulated so far with those micro-batches' losses. Plain
tensors, numbers, strings and lists only, so it loads with torch.load(weights_only=True). A file that
loads is still checked to hold all of that, each part of its kind (check_whole), before a run resumes.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterator

import torch

from gaccum_core.config import RunConfig

FORMAT = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot resume this run exactly; the message names what differs."""


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


def check_compatible(state: dict[str, Any], config: dict[str, Any], length_fields: tuple[str, ...]) -> None:
    """Refuse a checkpoint this run cannot continue exactly: other format, torch or settings."""
    if state.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint.pt has format {state.get('format')!r}, this gaccum reads {FORMAT}")
    if state.get("torch_version") != torch.__version__:
        raise CheckpointError(f"checkpoint.pt was written by torch {state.get('torch_version')}, this is "
                              f"torch {torch.__version__}: kernels may differ, so the resumed run would not be exact")
    if not isinstance(state.get("config", {}), dict):
        raise CheckpointError(f"checkpoint.pt's config is {_shown(state['config'])}, not the run's settings (a dict)")
    # A setting added since the checkpoint was written reads as its default, as config.json's does.
    saved = {**RunConfig().to_dict(), **state.get("config", {})}
    changed = sorted(k for k in set(saved) | set(config)
                     if k not in length_fields and saved.get(k) != config.get(k))
    if changed:
        details = ", ".join(f"{k}: {saved.get(k)!r} -> {config.get(k)!r}" for k in changed[:4])
        raise CheckpointError(f"the settings changed since the checkpoint ({details}); only the run's length "
                              f"({', '.join(length_fields)}) may change on resume")


# What a part of checkpoint.pt is called when it is missing.
_PARTS = {"model": "model weights", "optimizer": "optimizer state", "rng": "random generators' states",
          "counters": "step counters", "position": "position", "sharded": "sharded directory"}


def check_whole(state: dict[str, Any], sharded: bool, shapes: dict[str, torch.Size] | None = None) -> None:
    """Refuse a checkpoint.pt that loads but does not hold what capture() writes, each part of its kind;
    CheckpointError naming the first part that is not, its value and what belongs there. sharded: the run
    keeps its model and optimizer in checkpoint.dcp (else in checkpoint.pt); shapes: the model's tensors'
    shapes, where known."""
    problem = next(_problems(state, sharded, shapes), None)
    if problem is not None:
        raise CheckpointError(f"checkpoint.pt{problem}: not a whole gaccum checkpoint")


def _problems(state: dict[str, Any], sharded: bool, shapes: dict[str, torch.Size] | None) -> Iterator[str]:
    """What is wrong with each part, as the words after "checkpoint.pt"; nothing for a whole checkpoint.
    Read up to its first problem: each check looks only at parts the ones before it found sound."""
    kept_here = ("rng", "counters", "position") if sharded else ("model", "optimizer", "rng", "counters", "position")
    for part in (*kept_here, *(("sharded",) if sharded else ())):
        if part not in state:
            yield f" lacks its {_PARTS[part]} ({part})"
    if not sharded:
        yield from _model_problems(state["model"], shapes)
        yield from _optimizer_problems(state["optimizer"], state.get("grads"))
    yield from _rng_problems(state["rng"])
    yield from _count_problems("counters", state["counters"], Counters, {"last_eval_step": -1})
    if "step" not in state["counters"]:
        yield " lacks its step counters (counters.step)"
    yield from _count_problems("position", state["position"], Position, {})
    for part in ("grads", "in_flight"):
        values = state.get(part, [])
        if not isinstance(values, list) or any(v is not None and not torch.is_tensor(v) for v in values):
            yield f"'s {part} is {_shown(values)}, not a list of tensors"
    micro = state["position"].get("micro", 0)
    if len(state.get("in_flight", [])) != micro:
        yield (f"'s in_flight holds {len(state['in_flight'])} losses, not the {micro} of the micro-batches "
               "position.micro says are done")
    for part, kind in (("scheduler", (dict, type(None))), ("scaler", dict)):
        if not isinstance(state.get(part), kind):
            yield f"'s {part} is {_shown(state.get(part))}, not a state dict"
    wall = state.get("wall_time_s", 0.0)
    if isinstance(wall, bool) or not isinstance(wall, (int, float)) or not math.isfinite(wall) or wall < 0:
        yield f"'s wall_time_s is {_shown(wall)}, not a number of seconds ≥ 0"


def _model_problems(model: Any, shapes: dict[str, torch.Size] | None) -> Iterator[str]:
    if not isinstance(model, dict) or not model or not all(torch.is_tensor(v) for v in model.values()):
        yield f"'s model is {_shown(model)}, not a state_dict of tensors"
        return
    if shapes is None:
        return
    for key in [*(k for k in shapes if k not in model), *(k for k in model if k not in shapes)]:
        yield f"'s model {'lacks' if key in shapes else 'has an unknown tensor'} {key!r}, the model's tensors differ"
    for key, shape in shapes.items():
        if key in model and model[key].shape != shape:
            yield f"'s model[{key!r}] has shape {tuple(model[key].shape)}, the model's is {tuple(shape)}"


def _optimizer_problems(optimizer: Any, grads: Any) -> Iterator[str]:
    whole = isinstance(optimizer, dict) and isinstance(optimizer.get("state"), dict) \
        and isinstance(optimizer.get("param_groups"), list) \
        and all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in optimizer["param_groups"])
    if not whole:
        yield f"'s optimizer is {_shown(optimizer)}, not an optimizer's state_dict (state, param_groups)"
        return
    count = sum(len(g["params"]) for g in optimizer["param_groups"])
    if isinstance(grads, list) and len(grads) != count:
        yield f"'s optimizer steps {count} parameters, its grads hold {len(grads)}: they belong to different models"


def _rng_problems(rng: Any) -> Iterator[str]:
    generator = rng.get("torch") if isinstance(rng, dict) else None
    if not torch.is_tensor(generator) or generator.dtype != torch.uint8 or not generator.numel():
        yield f"'s rng is {_shown(rng)}, not the random generators' states (a ByteTensor 'torch', 'python')"
        return
    python = rng.get("python")
    if not isinstance(python, list) or len(python) != 3 or not isinstance(python[1], list) or \
            len(python[1]) != len(random.getstate()[1]):
        yield f"'s rng['python'] is {_shown(python)}, not Python's random.getstate() as a list"


def _count_problems(part: str, values: Any, kind: type, lowest: dict[str, int]) -> Iterator[str]:
    if not isinstance(values, dict):
        yield f"'s {part} is {_shown(values)}, not a dict of whole numbers"
        return
    names = [f.name for f in fields(kind)]
    for key, value in values.items():
        least = lowest.get(key, 0)
        if key not in names:
            yield f"'s {part} has {key!r}: not one of {', '.join(names)}"
        elif isinstance(value, bool) or not isinstance(value, int) or value < least:
            yield f"'s {part}.{key} is {_shown(value)}, not a whole number ≥ {least}"


def _shown(value: Any) -> str:
    """A value as a message shows it: small ones as written, others by their kind."""
    if torch.is_tensor(value):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
    if value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 40):
        return repr(value)
    return f"an empty {type(value).__name__}" if not value and hasattr(value, "__len__") else \
        f"a {type(value).__name__}"

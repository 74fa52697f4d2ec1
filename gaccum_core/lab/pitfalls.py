"""The classic gradient-accumulation bugs, each run against the correct loop on the same samples.

Every loop here starts from one copy of the same initial weights and reads the same micro-batches
(epoch_order, windows of b*k, micro-batches of b). The reference is the one-big-batch run: one
batch of the window's samples per optimizer step, per-sample mean loss. The exact accumulated loop
equals it to rounding; each pitfall is the loop as users write it, with one classic mistake.

#6 (a mean of per-micro-batch means on sequences) is a setting of the engine itself: gpt on text,
reduction "mean_per_micro_batch" (the textbook loop) against "mean" (exact) and one big batch, each
an Engine run whose weights a metric sink copies after every optimizer step.
"""

from __future__ import annotations

import copy
import itertools
import statistics
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import pandas as pd
import torch

from gaccum_core.train.accumulation import epoch_order, plan_epoch
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data.images import ImageSource, load_data
from gaccum_core.train.engine import Engine
from gaccum_core.train.loss import summed_cross_entropy
from gaccum_core.models.vision import build_seeded_model
from gaccum_core.train.optim import make_optimizer, make_scheduler
from gaccum_core.train.precision import Precision
from gaccum_core.train.step import Optimization, accumulate_step

Batch = tuple[torch.Tensor, torch.Tensor]
BASE_CONFIG = RunConfig(model="mlp", dataset="digits", micro_batch_size=8, accum_steps=4, device="cpu")
# #8 calls scheduler.step() before the first optimizer.step(), which PyTorch warns about; the gallery shows it.
_SCHEDULER_ORDER_WARNING = r"Detected call of `lr_scheduler.step\(\)` before `optimizer.step\(\)`"


@dataclass(frozen=True)
class Pitfall:
    """One classic accumulation bug: what goes wrong, why, the fix, and settings that show it best."""

    key: str
    title: str
    explanation: str  # two lines: what goes wrong, and why
    fix: str
    default: dict[str, Any]  # RunConfig fields over BASE_CONFIG (+ train_samples, except #6)


@dataclass(frozen=True)
class PitfallResult:
    """A pitfall's run and the correct loop's run, measured against the big-batch reference."""

    key: str
    frame: pd.DataFrame  # one row per optimizer step
    final_distance_pitfall: float
    final_distance_correct: float
    grad_norm_ratio: float  # median over steps of pitfall grad norm / reference grad norm


@dataclass(frozen=True)
class _Step:
    weights: torch.Tensor  # all parameters after the step, flat, float64
    grad_norm: float  # of the gradient the optimizer was handed (unscaled, before clipping)
    loss: float  # mean per-sample loss of the samples fed since the previous step
    samples: int


class _Kit:
    """What every loop gets: its own model copy, optimizer, scaler, scheduler and the micro-batches."""

    def __init__(self, config: RunConfig, train: ImageSource, model: torch.nn.Module,
                 num_samples: int, steps: int) -> None:
        self.config, self.k, self.steps = config, config.accum_steps, steps
        self.model = copy.deepcopy(model)
        self.params = list(self.model.parameters())
        self.optimizer = make_optimizer(config, self.params)
        self.scheduler = make_scheduler(config, self.optimizer, steps)
        self.precision = Precision(config.amp, torch.device("cpu"), config.init_scale, config.growth_interval)
        self.scaler = self.precision.scaler  # disabled (a no-op) unless fp16
        self._train, self._num_samples = train, num_samples
        self._losses: list[torch.Tensor] = []
        self._samples = 0

    def loaders(self) -> Iterator[list[Batch]]:
        """Each epoch's micro-batches in order, forever: what the tutorials `enumerate(loader)` over."""
        return ([micro for window in windows for micro in window] for windows in self._epochs())

    def windows(self) -> Iterator[list[Batch]]:
        """The micro-batches of each window (an epoch's last window may be partial), forever."""
        return itertools.chain.from_iterable(self._epochs())

    def _epochs(self) -> Iterator[list[list[Batch]]]:
        for epoch in itertools.count():
            order = epoch_order(self._num_samples, self.config.seed, epoch)
            plan = plan_epoch(self._num_samples, self.config.micro_batch_size, self.k)
            yield [[self._train.batch(order[m.start:m.stop]) for m in window.micro_batches] for window in plan]

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of one batch, as the tutorials take it; recorded for the step's loss."""
        loss_sum = summed_cross_entropy(self.model, self.precision, x, y)
        self._losses.append(loss_sum.detach())
        self._samples += len(y)
        return loss_sum / len(y)

    def shared_step(self, window: list[Batch]) -> _Step:
        """The shared accumulation step (gaccum_core.train.step) over the window's micro-batches."""
        samples = sum(len(y) for _, y in window)
        opt = Optimization(self.params, self.optimizer, self.scheduler, self.precision, self.config.grad_clip)
        result = accumulate_step(opt, window, lambda xy: summed_cross_entropy(self.model, self.precision, *xy),
                                 samples)
        loss_sum, norm = torch.stack([result.loss_sum, result.grad_norm.float()]).tolist()
        return _Step(_flat(self.params), norm, loss_sum / samples, samples)

    def step(self, schedule: bool = True, update_scale: bool = True) -> _Step:
        """The pitfalls' textbook step: unscale, (clip,) scaler.step, scaler.update, scheduler.step, zero_grad."""
        self.scaler.unscale_(self.optimizer)
        grads = [p.grad for p in self.params if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads).item() if grads else 0.0
        if self.config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.config.grad_clip)
        self.scaler.step(self.optimizer)
        if update_scale:
            self.scaler.update()
        if schedule and self.scheduler is not None:
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        loss = torch.stack(self._losses).sum().item() / self._samples
        done = _Step(_flat(self.params), norm, loss, self._samples)
        self._losses, self._samples = [], 0
        return done


Loop = Callable[[_Kit], Iterator[_Step]]


# The reference and the correct loop.

def _big_batch(kit: _Kit) -> Iterator[_Step]:
    """The reference: the shared step on one batch of all the window's samples, per-sample mean loss."""
    for window in kit.windows():
        yield kit.shared_step([(torch.cat([x for x, _ in window]), torch.cat([y for _, y in window]))])


def _exact(kit: _Kit) -> Iterator[_Step]:
    """Exact accumulation: the shared step, each micro-batch's summed loss over the window's sample count."""
    for window in kit.windows():
        yield kit.shared_step(window)


# The pitfalls, as the tutorials write them.

def _step_when_i_mod_k_is_0(kit: _Kit) -> Iterator[_Step]:
    for loader in kit.loaders():
        for i, (x, y) in enumerate(loader):
            kit.scaler.scale(kit.loss(x, y) / kit.k).backward()
            if i % kit.k == 0:  # true at i = 0: the first step sees one micro-batch
                yield kit.step()


def _zero_grad_before_step(kit: _Kit) -> Iterator[_Step]:
    for window in kit.windows():
        for x, y in window:
            kit.scaler.scale(kit.loss(x, y) / kit.k).backward()
        kit.optimizer.zero_grad()  # wipes the window's gradients just before they are used
        yield kit.step()


def _mean_without_dividing_by_k(kit: _Kit) -> Iterator[_Step]:
    for window in kit.windows():
        for x, y in window:
            kit.scaler.scale(kit.loss(x, y)).backward()  # k means add up: k x the window mean
        yield kit.step()


def _lr_divided_by_k(kit: _Kit) -> Iterator[_Step]:
    kit.optimizer = make_optimizer(kit.config.replace(lr=kit.config.lr / kit.k), kit.params)
    kit.scheduler = make_scheduler(kit.config, kit.optimizer, kit.steps)
    yield from _mean_without_dividing_by_k(kit)


def _partial_window_divided_by_k(kit: _Kit) -> Iterator[_Step]:
    for loader in kit.loaders():
        for i, (x, y) in enumerate(loader):
            kit.scaler.scale(kit.loss(x, y) / kit.k).backward()  # / k even when fewer are left
            if (i + 1) % kit.k == 0 or i + 1 == len(loader):
                yield kit.step()


def _scheduler_per_micro_batch(kit: _Kit) -> Iterator[_Step]:
    for window in kit.windows():
        for x, y in window:
            kit.scaler.scale(kit.loss(x, y) / kit.k).backward()
            kit.scheduler.step()  # k scheduler steps per optimizer step
        yield kit.step(schedule=False)


def _scaler_update_inside_window(kit: _Kit) -> Iterator[_Step]:
    clean = 0  # the scaler's growth clock, here ticking per micro-batch
    for window in kit.windows():
        for x, y in window:
            kit.scaler.scale(kit.loss(x, y) / kit.k).backward()
            clean = _update_scale_now(kit.scaler, kit.params, clean)  # scaler.update(), mid-window
        yield kit.step(update_scale=False)  # unscales the whole window by the last scale


def _update_scale_now(scaler: torch.amp.GradScaler, params: list[torch.nn.Parameter], clean: int) -> int:
    """What `scaler.update()` does, made mid-window: back off after inf/NaN, grow after growth_interval clean calls.

    GradScaler refuses a bare update() with no scaler.step() since the last one, so the decision is made here.
    """
    finite = all(bool(torch.isfinite(p.grad).all()) for p in params if p.grad is not None)
    clean = (clean + 1) % scaler.get_growth_interval() if finite else 0
    factor = scaler.get_backoff_factor() if not finite else scaler.get_growth_factor() if clean == 0 else 1.0
    scaler.update(scaler.get_scale() * factor)
    return clean


PITFALLS: dict[str, Pitfall] = {p.key: p for p in (
    Pitfall("step_when_i_mod_k_is_0", "Stepping when i % k == 0",
            "The first step comes after ONE micro-batch, and every later window is shifted: 1, k, k, ... batches.\n"
            "enumerate() counts from 0, so i % k == 0 fires at once: a whole step on b samples, divided by k.",
            "if (i + 1) % k == 0: step", {}),
    Pitfall("zero_grad_before_step", "zero_grad() before step()",
            "The step gets no gradient at all: the weights never move (under a GradScaler, PyTorch raises instead).\n"
            "zero_grad() between the last backward and (scaler.)step() wipes the window's gradients before use.",
            "step first, then optimizer.zero_grad(set_to_none=True)", {}),
    Pitfall("mean_without_dividing_by_k", "Mean loss not divided by k",
            "The gradient is k x the big batch's: in effect a k x larger lr; clipping bites at a k x smaller norm.\n"
            "Each micro-batch mean already averages b samples; k of them added up without / k are k x the mean.",
            "loss = criterion(logits, y) / k", {"lr": 0.005}),
    Pitfall("lr_divided_by_k", "lr / k instead of loss / k",
            "With Adam the steps come out ~k x too small: Adam divides by the gradient's scale, leaving only lr / k.\n"
            "With SGD and no weight decay (momentum too: it is linear) lr/k * k*g = lr*g exactly, so it looks safe.",
            "keep the lr, divide the loss: loss = criterion(logits, y) / k", {"optimizer": "adam", "lr": 1e-3}),
    Pitfall("partial_window_divided_by_k", "Partial last window divided by k",
            "An epoch's last window has under k micro-batches, each still divided by k: here 2 of 4, half a step.\n"
            "loss / k is the window mean only for full windows (here digits' first 304 samples: 9 x 32, then 16).",
            "loss = criterion(logits, y, reduction='sum') / samples_in_window", {"train_samples": 304}),
    Pitfall("mean_of_means_sequences", "Mean of per-micro-batch means on sequences",
            "Each micro-batch's token mean counts 1/k, so the tokens of a short micro-batch outweigh a long one's.\n"
            "The big batch averages over the window's tokens; here gpt on pydoc, whose documents end in short chunks.",
            "loss = token_loss_sum / tokens_in_window  # the engine's reduction='mean'",
            {"model": "gpt", "dataset": "pydoc", "max_seq_len": 256, "micro_batch_size": 1}),
    Pitfall("batchnorm_small_micro_batches", "BatchNorm with small micro-batches",
            "BatchNorm normalises each micro-batch by its own statistics: k batches of 2 are not one batch of 2k.\n"
            "No loss weighting fixes that; GroupNorm (cnn_gn, the correct column) normalises each sample alone.",
            "use GroupNorm or LayerNorm, or micro-batches big enough for stable statistics",
            {"model": "cnn_bn", "micro_batch_size": 2, "accum_steps": 8}),
    Pitfall("scheduler_per_micro_batch", "LR scheduler stepped per micro-batch",
            "The schedule runs k x too fast: a 20-step warmup is over after 20 / k optimizer steps.\n"
            "LambdaLR counts scheduler.step() calls: k per optimizer step in the micro-batch loop (PyTorch warns).",
            "scheduler.step() right after optimizer.step(), once per window", {"warmup_steps": 20}),
    Pitfall("scaler_update_inside_window", "scaler.update() inside the window",
            "The scale changes mid-window: the window's gradients carry different scales, all unscaled by the last.\n"
            "Its clock ticks per micro-batch, so it grows k x as often, overflows, and whole windows are skipped.",
            "scaler.step(optimizer); scaler.update()  # once per window",
            {"amp": "fp16", "init_scale": 1024.0, "growth_interval": 3}),
)}

_LOOPS: dict[str, Loop] = {loop.__name__[1:]: loop for loop in (
    _step_when_i_mod_k_is_0, _zero_grad_before_step, _mean_without_dividing_by_k, _lr_divided_by_k,
    _partial_window_divided_by_k, _scheduler_per_micro_batch, _scaler_update_inside_window)}
_LOOPS["batchnorm_small_micro_batches"] = _exact  # the loop is right; the model cannot be accumulated
_CORRECT_SIDE = {"batchnorm_small_micro_batches": {"model": "cnn_gn"}}


def run_pitfall(key: str, steps: int = 20, **overrides: Any) -> PitfallResult:
    """Run one pitfall, the correct loop and the big-batch reference for `steps` optimizer steps."""
    if key not in PITFALLS:
        raise KeyError(f"unknown pitfall {key!r}: one of {', '.join(PITFALLS)}")
    if not isinstance(steps, int) or steps < 1:
        raise ConfigError("steps", steps, "an integer ≥ 1")
    settings = {**PITFALLS[key].default, **overrides}
    if key == "mean_of_means_sequences":
        return _run_sequences(steps, settings)
    train_samples = settings.pop("train_samples", 0)
    config = RunConfig.from_dict({**BASE_CONFIG.to_dict(), **settings})
    run = _runner(config, train_samples, steps)
    reference, pitfall = run(_big_batch), run(_LOOPS[key])
    correct_config = config.replace(**_CORRECT_SIDE.get(key, {}))
    if correct_config != config:  # #7: the correct column is another model against its own big batch
        run = _runner(correct_config, train_samples, steps)
    correct_reference = reference if correct_config == config else run(_big_batch)
    correct = run(_exact)
    return _result(key, pitfall, reference, correct, correct_reference)


def run_all(steps: int = 20) -> list[PitfallResult]:
    """Every pitfall with its default settings, in PITFALLS order."""
    return [run_pitfall(key, steps) for key in PITFALLS]


def _runner(config: RunConfig, train_samples: int, steps: int) -> Callable[[Loop], list[_Step]]:
    """Runs loops on config's data, each from a deep copy of one initial model."""
    data = load_data(config)
    num_samples = train_samples or len(data.train)
    if not config.micro_batch_size <= num_samples <= len(data.train):
        raise ConfigError("train_samples", train_samples,
                          f"0 (all) or from micro_batch_size to {len(data.train)}, the size of {config.dataset}")
    model = build_seeded_model(config, data.input_shape, data.num_classes)

    def run(loop: Loop) -> list[_Step]:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_SCHEDULER_ORDER_WARNING)
            return list(itertools.islice(loop(_Kit(config, data.train, model, num_samples, steps)), steps))

    return run


def _flat(params: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params]).double()


def _distances(run: list[_Step], reference: list[_Step]) -> list[float]:
    return [torch.linalg.vector_norm(a.weights - b.weights).item() for a, b in zip(run, reference)]


def _result(key: str, pitfall: list[_Step], reference: list[_Step], correct: list[_Step],
            correct_reference: list[_Step]) -> PitfallResult:
    ratios = [p.grad_norm / r.grad_norm if r.grad_norm > 0 else float("nan") for p, r in zip(pitfall, reference)]
    frame = pd.DataFrame({
        "step": range(1, len(pitfall) + 1),
        "distance_pitfall": _distances(pitfall, reference),
        "distance_correct": _distances(correct, correct_reference),
        "grad_norm_ratio": ratios,
        "loss_pitfall": [s.loss for s in pitfall],
        "loss_correct": [s.loss for s in correct],
        "samples_pitfall": [s.samples for s in pitfall],  # samples fed since the previous step
    })
    return PitfallResult(key, frame, float(frame["distance_pitfall"].iloc[-1]),
                         float(frame["distance_correct"].iloc[-1]), float(statistics.median(ratios)))


# #6 runs the engine: these are the comparison's to set, not the caller's.
_SEQUENCE_FIXED = {"reduction": "mean (correct) and mean_per_micro_batch (the pitfall)", "max_steps": "steps",
                   "epochs": "as many as steps need", "eval_every": "never", "checkpoint_every": "never",
                   "nproc": "1", "nnodes": "1", "train_samples": "the whole training set"}


class _Snapshots:
    """A metric sink keeping each optimizer step's weights, gradient norm, loss and sample count.

    log_step comes right after the optimizer step, so the model's parameters are that step's."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.params = list(model.parameters())
        self.steps: list[_Step] = []

    def log_step(self, row: dict[str, Any]) -> None:
        """Copy the weights the step left and take its row's grad_norm, loss and samples."""
        self.steps.append(_Step(_flat(self.params), row["grad_norm"], row["loss"], row["samples"]))

    def log_eval(self, row: dict[str, Any]) -> None:
        """Nothing: the gallery does not evaluate."""


def _engine_steps(config: RunConfig, steps: int) -> list[_Step]:
    """`steps` optimizer steps of an Engine run, from the weights config.seed gives every run."""
    # One more step is planned and the run stops before it: a stopped run skips the final evaluation.
    engine = Engine(config.replace(max_steps=steps + 1))
    sink = _Snapshots(engine.model)
    engine.run(sink, should_stop=lambda: len(sink.steps) >= steps)
    return sink.steps


def _run_sequences(steps: int, settings: dict[str, Any]) -> PitfallResult:
    """#6 on the engine: reduction mean_per_micro_batch and mean, each against one big batch of b*k
    sequences per step; the three runs start from the same seeded gpt and read the same windows."""
    for name, value in _SEQUENCE_FIXED.items():
        if name in settings:
            raise ConfigError(name, settings[name], f"left to the gallery for this pitfall: {value}")
    config = RunConfig.from_dict({**BASE_CONFIG.to_dict(), **settings, "reduction": "mean", "epochs": 10**6,
                                  "eval_every": 10**9, "checkpoint_every": 0})
    b, k, num_train = config.micro_batch_size, config.accum_steps, len(load_data(config).train)
    if b * k > num_train:  # the reference's one micro-batch would not fit: say so of b, not of b*k
        raise ConfigError("micro_batch_size", b, f"at most {num_train // k} with accum_steps={k}: the big batch "
                          f"of b*k sequences must fit in the {config.dataset} training set ({num_train})")
    reference = _engine_steps(config.replace(micro_batch_size=b * k, accum_steps=1), steps)
    correct = _engine_steps(config, steps)
    pitfall = _engine_steps(config.replace(reduction="mean_per_micro_batch"), steps)
    return _result("mean_of_means_sequences", pitfall, reference, correct, reference)

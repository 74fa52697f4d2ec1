"""The training engine: exact gradient accumulation with AMP, clipping, scheduling and metrics.

One optimizer step per window of accum_steps micro-batches (the last window of an epoch may be
partial). Each micro-batch's summed loss is divided by the window's sample count (mean) or by 1
(sum), so the accumulated gradient equals the one-big-batch gradient on the same samples.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from gaccum_core import faults
from gaccum_core.train.accumulation import (MicroBatch, Window, epoch_order, micro_batch_divisors, plan_epoch,
                                      planned_steps)
from gaccum_core.train.checkpoint import Counters, Position, TrainingState, capture, check_compatible, restore
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data.images import load_data
from gaccum_core.train.device import autocast_works, resolve_device
from gaccum_core.train.distributed import Ranks, gather_step, share, sync_context, wrap
from gaccum_core.cli.doctor import compile_works_here
from gaccum_core.train.loss import summed_cross_entropy
from gaccum_core.train.memory import MB, MemoryProbe, SavedBytesPeak, clear_cache
from gaccum_core.train.metrics import MetricSink, Row
from gaccum_core.models.vision import build_model, build_seeded_model
from gaccum_core.states import RunState
from gaccum_core.train.step import Divisor, Optimization, StepResult, accumulate_step, never
from gaccum_core.data.text import IGNORE

StopCheck = Callable[[], bool]
SAMPLE_PROMPT = "The "  # every evaluation of a language run continues this, greedily
SAMPLE_TOKENS = 80
CheckpointSink = Callable[[dict], None]
LENGTH_FIELDS = ("epochs", "max_steps")  # a resumed run may be planned longer; nothing else may change


class CompileError(RuntimeError):
    """torch.compile could not compile the model on this device."""


class Diverged(ArithmeticError):
    """The loss became NaN or inf with no GradScaler to skip the step: training cannot recover."""

    def __init__(self, step: int, loss: float) -> None:
        self.step = step
        super().__init__(f"the loss became {loss} at optimizer step {step}: lower the learning rate, "
                         "set gradient clipping, or check the data")


def _compiled(model: torch.nn.Module, mode: str) -> torch.nn.Module:
    if mode == "off":
        return model
    return torch.compile(model, mode=None if mode == "default" else mode)


def _check_micro_batch(config: RunConfig, num_train: int) -> None:
    if config.micro_batch_size > num_train:
        raise ConfigError("micro_batch_size", config.micro_batch_size,
                          f"at most {num_train}, the size of the {config.dataset} training set")


def max_processes(device: torch.device) -> int:
    """Data-parallel processes this machine can run: one per GPU, or one per CPU core (for trying it out)."""
    if device.type == "cuda":
        return torch.cuda.device_count()
    return os.cpu_count() or 1


def _check_processes(config: RunConfig, device: torch.device) -> None:
    most = max_processes(device)
    if config.nproc > most:
        unit = "GPUs" if device.type == "cuda" else "CPU cores"
        raise ConfigError("nproc", config.nproc, f"1 to {most}, the {unit} of this machine")


def preflight(config: RunConfig) -> None:
    """Check, before any run directory exists, what only the device, data and model can tell."""
    device = resolve_device(config.device)
    if config.amp != "off":
        dtype = torch.float16 if config.amp == "fp16" else torch.bfloat16
        works, why = autocast_works(device, dtype)
        if not works:
            raise ConfigError("amp", config.amp, f"off or a precision {device} supports ({why})")
    if config.compile != "off":
        works, why = compile_works_here(str(device))
        if not works:
            raise ConfigError("compile", config.compile, f"off: torch.compile does not work on {device} ({why})")
    _check_processes(config, device)
    data = load_data(config)
    _check_micro_batch(config, len(data.train))
    if not config.is_text:  # an image model must take the images at this size; gpt takes any max_seq_len it embeds
        build_model(config.model, data.input_shape, data.num_classes, config.image_size)


class Engine:
    """One run's data, model, optimizer and precision on one device (one rank of a data-parallel job)."""

    def __init__(self, config: RunConfig, device: torch.device | None = None, ranks: Ranks = Ranks()) -> None:
        self.config, self.ranks = config, ranks
        self.device = device or resolve_device(config.device)
        self.data = load_data(config)
        self.num_train = len(self.data.train)
        _check_micro_batch(config, self.num_train)
        self.model = build_seeded_model(config, self.data.input_shape, self.data.num_classes).to(self.device)
        self.ddp, self.allreduce = wrap(self.model, self.device) if ranks.distributed else (None, None)
        self.forward = _compiled(self.ddp or self.model, config.compile)
        # A global micro-batch holds every rank's micro-batch: windows are planned over the whole job.
        self.global_micro_batch = config.micro_batch_size * ranks.world_size
        self.total_steps = planned_steps(self.num_train, self.global_micro_batch, config.accum_steps,
                                         config.epochs, config.max_steps)
        self.opt = Optimization.from_config(config, self.model, self.device, self.total_steps)
        self.optimizer, self.precision = self.opt.optimizer, self.opt.precision
        self.memory = MemoryProbe(self.device)
        self.activations = SavedBytesPeak(self.opt.params)
        self._activation_size = 0
        self._cache_clear_s = 0.0  # seconds spent clearing the cache in the current window
        self._stop_agreed = False  # a data-parallel run stops when any rank asked, at the same step
        self.training = TrainingState()  # position, counters, in-flight losses: what a checkpoint carries

    def checkpoint(self) -> dict:
        """A checkpoint of the run where it is now (see gaccum_core.train.checkpoint)."""
        self.training.wall_time_s = time.perf_counter() - self._start
        return capture(self.model, self.opt, self.opt.params, self.training, self.config.to_dict(), self.device)

    def resume_from(self, state: dict) -> None:
        """Continue from a checkpoint: weights, optimizer, schedule, scaler, RNGs, position, in-flight gradients."""
        check_compatible(state, self.config.to_dict(), LENGTH_FIELDS)
        self.training = restore(state, self.model, self.opt, self.opt.params, self.device)

    def run(self, sink: MetricSink, should_stop: StopCheck = lambda: False,
            on_checkpoint: CheckpointSink | None = None, steps: int | None = None,
            evaluate: bool = True) -> RunState:
        """Train until the planned steps are done ('finished') or should_stop() ('stopped'), from the start
        or from where resume_from() put the run; on_checkpoint gets a checkpoint on a stop, every
        config.checkpoint_every steps and at the end (single-process runs).

        steps: train exactly this many more optimizer steps instead, into later epochs if need be (the
        planner's bursts, the lab's runs). evaluate=False: no evaluation at all."""
        cfg, training = self.config, self.training
        counters, begin = training.counters, training.position
        self._start = time.perf_counter() - training.wall_time_s
        target = self.total_steps if steps is None else counters.step + steps
        epochs = cfg.epochs if steps is None else None  # None: as many epochs as the steps take
        evaluations = self._log_eval if evaluate else (lambda sink, epoch, counters: None)
        save = on_checkpoint  # given to rank 0 only: the ranks' states are the same at every step's end
        self.model.train()
        epoch = begin.epoch
        for epoch in itertools.count(begin.epoch) if epochs is None else range(begin.epoch, epochs):
            order = epoch_order(self.num_train, cfg.seed, epoch)
            windows = plan_epoch(self.num_train, self.global_micro_batch, cfg.accum_steps)
            for index in range(begin.window if epoch == begin.epoch else 0, len(windows)):
                if counters.step >= target:
                    break
                training.position = Position(epoch, index, len(training.in_flight))
                row = self._guarded_window(windows[index], order, epoch, counters, should_stop)
                if row is None:  # stopped mid-window: .grad and in_flight hold its first micro-batches
                    training.position = Position(epoch, index, len(training.in_flight))
                    if save is not None:
                        save(self.checkpoint())
                    self.optimizer.zero_grad(set_to_none=True)
                    return RunState.STOPPED
                training.position = Position(epoch, index + 1, 0)
                sink.log_step(row)
                if not math.isfinite(row["loss"]) and not self.precision.uses_scaler:
                    raise Diverged(row["step"], row["loss"])
                if cfg.eval_every and counters.step % cfg.eval_every == 0:
                    evaluations(sink, epoch, counters)
                if self._stop_agreed:
                    if save is not None:
                        save(self.checkpoint())
                    return RunState.STOPPED
                periodic = cfg.checkpoint_every and counters.step % cfg.checkpoint_every == 0
                if save is not None and periodic and counters.step < target:  # the last: at the end
                    save(self.checkpoint())
            if not cfg.eval_every and counters.step > counters.last_eval_step:
                evaluations(sink, epoch, counters)
            if counters.step >= target:
                break
            training.position = Position(epoch + 1, 0, 0)
        if counters.step > counters.last_eval_step:
            evaluations(sink, epoch, counters)
        if save is not None:
            save(self.checkpoint())
        return RunState.FINISHED

    def _guarded_window(self, window: Window, order: torch.Tensor, epoch: int,
                        counters: Counters, should_stop: StopCheck) -> Row | None:
        """_train_window, explaining BatchNorm on one sample and compiler failures (raised on first use)."""
        try:
            return self._train_window(window, order, epoch, counters, should_stop)
        except ValueError as exc:
            if "Expected more than 1 value per channel" not in str(exc):
                raise
            raise ConfigError("micro_batch_size", self.config.micro_batch_size,
                              f"a size whose micro-batches all hold 2 or more samples for {self.config.model}: "
                              "its BatchNorm cannot normalise a single value per channel (a last "
                              f"micro-batch of 1 sample occurs when {self.num_train} % micro_batch_size == 1)"
                              ) from exc
        except Exception as exc:
            origin = type(exc).__module__
            if self.config.compile == "off" or not origin.startswith(("torch._dynamo", "torch._inductor")):
                raise
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise CompileError(f"torch.compile(mode={self.config.compile!r}) failed on {self.device}: "
                               f"{first_line[:300]}. Set compile to off.") from exc

    def _measure_activations(self, micro_batch_size: int) -> bool:
        """Whether this micro-batch's saved tensors must be counted: the saved bytes depend only on
        the micro-batch size (same model, precision and device), so count once per size."""
        if micro_batch_size == self._activation_size:
            return False
        self._activation_size = micro_batch_size
        return True

    def _micro_batches(self, window: Window, first: int = 0) -> Iterator[tuple[int, MicroBatch]]:
        """The window's micro-batches from `first` on (a resumed window), numbered from the window's
        start; with clear_cache=micro, clears after each backward."""
        for i, micro in enumerate(window.micro_batches):
            if i < first:
                continue
            # Suspended inside the context while the caller runs this micro-batch's forward and backward:
            # DDP skips the gradient all-reduce for every micro-batch but the window's last.
            with sync_context(self.ddp, micro.ends_window, self.config.sync_every_micro_batch):
                yield i, micro
            # Resumed when accumulate_step asks for the next micro-batch: this one's backward is done.
            if self.config.clear_cache == "micro":
                self._cache_clear_s += clear_cache(self.device)

    def _loss_sum(self, order: torch.Tensor, step: int, numbered: tuple[int, MicroBatch]) -> torch.Tensor:
        """One micro-batch's summed loss; its saved activations counted once per size; faults applied."""
        i, micro = numbered
        start, stop = share(micro, self.ranks, self.config.micro_batch_size)
        x, y = self.data.train.batch(order[start:stop])
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        fault = faults.due(step, i) if faults.ARMED else None
        first = i == self.training.position.micro  # the window's first micro-batch run in this segment
        with self.activations.measure() if first and self._measure_activations(stop - start) else nullcontext():
            loss = lambda: summed_cross_entropy(self.forward, self.precision, x, y)  # noqa: E731
            return loss() if fault is None else faults.inject(fault, loss)

    def _train_window(self, window: Window, order: torch.Tensor, epoch: int,
                      counters: Counters, should_stop: StopCheck) -> Row | None:
        """Accumulate one window and take one optimizer step; None when stopped mid-window."""
        start, self._cache_clear_s = time.perf_counter(), 0.0
        self.memory.start_step()
        lr = self.optimizer.param_groups[0]["lr"]
        step = counters.step + 1
        if self.allreduce is not None:
            self.allreduce.reset()
        # DDP's ranks must run the same micro-batches: they agree on a stop once per step (in _measured).
        local_stop = never if self.ranks.distributed else should_stop
        # A single process keeps a stopped window's gradients and losses (in_flight) for its checkpoint.
        in_flight = None if self.ranks.distributed else self.training.in_flight
        # DDP averages the ranks' gradients: each rank divides by its share of the window's divisor.
        count, divisor = self._weighting(window, order)
        result = accumulate_step(self.opt, self._micro_batches(window, self.training.position.micro),
                                 lambda numbered: self._loss_sum(order, step, numbered),
                                 divisor, local_stop, in_flight)
        if result is None:
            return None
        self.training.in_flight = []
        if self.config.clear_cache == "step":
            self._cache_clear_s += clear_cache(self.device)
        return self._row(window, count, epoch, counters, start, lr, result, should_stop)

    def _count(self, order: torch.Tensor, micro: MicroBatch) -> int:
        """What a mean divides by in this micro-batch: its samples, or its target tokens for text."""
        if not self.config.is_text:
            return micro.size
        return self.data.train.target_tokens(order[micro.start:micro.stop])

    def _weighting(self, window: Window, order: torch.Tensor) -> tuple[int, Divisor]:
        """The window's count (samples, or target tokens) and each micro-batch's divisor."""
        counts = [self._count(order, micro) for micro in window.micro_batches]
        divisors = micro_batch_divisors(self.config.reduction, counts, self.ranks.world_size, self.config.accum_steps)
        return sum(counts), lambda numbered: divisors[numbered[0]]

    def _measured(self, result: StepResult, should_stop: StopCheck) -> dict[str, float | None]:
        """The step's loss sum, gradient norm and memory over the whole job: one host sync per step, and
        on several ranks one all_gather (loss summed, memory the largest rank's, a stop if any asked)."""
        memory = {**self.memory.read(), "activation_mb": self.activations.peak / MB}
        if not self.ranks.distributed:
            loss_sum, grad_norm = torch.stack([result.loss_sum, result.grad_norm.float()]).tolist()
            return {"loss_sum": loss_sum, "grad_norm": grad_norm, **memory}
        names = list(memory)
        nan = float("nan")
        local = [result.loss_sum, result.grad_norm.float(), float(should_stop()),
                 *(nan if memory[n] is None else memory[n] for n in names)]
        rows = gather_step(local, self.device).cpu()
        self._stop_agreed = bool(rows[:, 2].max() > 0)
        # The gradients are all-reduced, so every rank's norm is the global one: rank 0's is taken.
        largest = [None if torch.isnan(c).all() else c.nan_to_num(-1.0).max().item() for c in rows[:, 3:].T]
        return {"loss_sum": rows[:, 0].sum().item(), "grad_norm": rows[0, 1].item(), **dict(zip(names, largest))}

    def _row(self, window: Window, count: int, epoch: int, counters: Counters, start: float, lr: float,
             result: StepResult, should_stop: StopCheck) -> Row:
        measured = self._measured(result, should_stop)
        step_time = time.perf_counter() - start
        counters.step += 1
        counters.samples_seen += window.samples
        counters.skipped_total += int(result.skipped)
        text = self.config.is_text
        counters.tokens_seen += count if text else 0
        loss_sum = measured.pop("loss_sum")
        return {
            "step": counters.step, "epoch": epoch, "micro_batches": len(window.micro_batches),
            "samples": window.samples, "samples_seen": counters.samples_seen,
            "tokens": count if text else None, "tokens_seen": counters.tokens_seen if text else None,
            "tokens_per_s": count / step_time if text and step_time > 0 else None,
            "loss": loss_sum / count, "lr": lr,
            "scale": result.scale, "skipped": int(result.skipped), "skipped_total": counters.skipped_total,
            **measured, "cache_clear_s": self._cache_clear_s, "step_time_s": step_time,
            "samples_per_s": window.samples / step_time if step_time > 0 else None,
            "wall_time_s": time.perf_counter() - self._start, "world_size": self.ranks.world_size,
            "allreduce_calls": self.allreduce.calls if self.allreduce else 0,
            "allreduce_bytes": self.allreduce.bytes if self.allreduce else 0,
        }

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        """Mean test loss and accuracy over the whole test split: per image, or per target token of text."""
        self.model.eval()
        # Batches of b: on a one-thread CPU larger ones measured no faster (gpt tiny, pydoc, 4b: 0.20 s vs 0.19 s).
        test, size = self.data.test, self.config.micro_batch_size
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device, dtype=torch.long)
        count = torch.zeros((), device=self.device, dtype=torch.long)
        for begin in range(0, len(test), size):
            x, y = test.batch(torch.arange(begin, min(begin + size, len(test))))
            x, y = x.to(self.device), y.to(self.device).flatten()
            with self.precision.autocast():
                # Eager, not compiled: switching a compiled model to eval mode would recompile it.
                logits = self.model(x).float().flatten(0, -2)  # text: (N*T, vocab)
            loss_sum += F.cross_entropy(logits, y, ignore_index=IGNORE, reduction="sum")
            scored = y != IGNORE
            correct += ((logits.argmax(dim=1) == y) & scored).sum()
            count += scored.sum()
        self.model.train()
        total = max(count.item(), 1)
        return loss_sum.item() / total, correct.item() / total

    def sample_text(self) -> str | None:
        """A greedy continuation of SAMPLE_PROMPT by the language model (None for images): the
        Train page shows one per evaluation, so a user sees that the model learns."""
        if not self.config.is_text:
            return None
        self.model.eval()
        prompt = torch.tensor(list(SAMPLE_PROMPT.encode("utf-8")), device=self.device)
        with self.precision.autocast():
            ids = self.model.generate(prompt, SAMPLE_TOKENS)
        self.model.train()
        return SAMPLE_PROMPT + bytes(ids.tolist()).decode("utf-8", errors="replace")

    def _log_eval(self, sink: MetricSink, epoch: int, counters: Counters) -> None:
        counters.last_eval_step = counters.step
        if not self.ranks.is_main:
            return  # the model is the same on every rank: rank 0 evaluates and writes
        test_loss, accuracy = self.evaluate()
        row = {"epoch": epoch, "step": counters.step, "test_loss": test_loss, "test_accuracy": accuracy,
               "perplexity": math.exp(min(test_loss, 700.0)) if self.config.is_text else None}
        sample = self.sample_text()
        if sample is not None:
            row["sample"] = sample  # the run store writes it to samples.jsonl, not to eval.csv
        sink.log_eval({**row, "wall_time_s": time.perf_counter() - self._start})

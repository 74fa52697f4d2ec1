"""The FSDP traps on one rank of the gallery's 2-process job: the engine's sharded runs (the correct setup),
each trap as people write it, and each trap's fix, all from the same seeded model sharded the engine's way
(train.fsdp.Sharded: each block, then the root) on the same windows.

Every rank runs every loop in the same order: a step's Snapshot gathers the whole weights, a collective.
run_cases returns plain tensors, lists, strings and bools, which rank 0 hands to the parent (fsdp_job).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

from gaccum_core.config import RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.data.sources import ImageSource
from gaccum_core.lab.pitfalls.result import Snapshot, flat
from gaccum_core.lab.pitfalls.sequences import SnapshotSink
from gaccum_core.models.build import build_seeded_model
from gaccum_core.train.accumulation import plan_epoch, windows_per_epoch
from gaccum_core.train.distributed import Ranks, share
from gaccum_core.train.engine import Engine
from gaccum_core.train.fsdp import Sharded, blocks
from gaccum_core.train.loss import summed_cross_entropy
from gaccum_core.train.step import Optimization
from gaccum_core.train.weighting import sample_order

Batch = tuple[torch.Tensor, torch.Tensor]
CPU = torch.device("cpu")


class RankKit:
    """What every hand-written loop gets on this rank: the seeded model sharded as the engine shards it, its
    optimizer, and each window's global sample count with this rank's share of its micro-batches."""

    def __init__(self, config: RunConfig, ranks: Ranks, train: ImageSource, model: torch.nn.Module,
                 steps: int) -> None:
        self.config, self.ranks, self._train = config, ranks, train
        self.sharded = Sharded(model, config)
        self.model, self.root, self.units = model, self.sharded.root, self.sharded.units
        self.opt = Optimization.from_config(config, model, CPU, steps)
        self.params = self.opt.params
        self._loss_sum = torch.zeros((), dtype=torch.float64)

    def windows(self) -> Iterator[tuple[int, list[Batch]]]:
        """(the window's samples over all ranks, this rank's micro-batches), in the engine's order, forever."""
        b, n = self.config.micro_batch_size, self.ranks.world_size
        for epoch in itertools.count():
            order = sample_order(self.config, self._train, epoch)
            for window in plan_epoch(len(self._train), b * n, self.config.accum_steps):
                mine = [share(micro, self.ranks, b) for micro in window.micro_batches]
                yield window.samples, [self._train.batch(order[start:stop]) for start, stop in mine]

    def loss_sum(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """This rank's summed cross-entropy of one micro-batch; recorded for the step's loss."""
        loss = summed_cross_entropy(self.model, self.opt.precision, x, y)
        self._loss_sum += loss.detach().double()
        return loss

    def step(self, samples: int) -> Snapshot:
        """The textbook step (clip, optimizer.step, scheduler, zero_grad) and the whole weights it left."""
        outcome = self.opt.precision.step(self.opt.optimizer, self.params, self.config.grad_clip)
        if self.opt.scheduler is not None:
            self.opt.scheduler.step()
        self.opt.optimizer.zero_grad(set_to_none=True)
        dist.all_reduce(self._loss_sum)  # the window's loss over every rank
        loss, self._loss_sum = self._loss_sum.item(), torch.zeros((), dtype=torch.float64)
        return Snapshot(flat(self.params), float(outcome.grad_norm), loss / samples, samples)


# The traps as people write them, and their fixes. `found` collects what a loop observes beside its steps.
Loop = Callable[[RankKit, dict[str, Any]], Iterator[Snapshot]]


def _averaged_gradients(kit: RankKit, found: dict[str, Any]) -> Iterator[Snapshot]:
    for samples, micro_batches in kit.windows():
        for x, y in micro_batches:
            (kit.loss_sum(x, y) / samples).backward()  # the window's mean, then FSDP averages over the ranks
        yield kit.step(samples)


def _divide_factor_on_root(kit: RankKit, found: dict[str, Any]) -> Iterator[Snapshot]:
    kit.root.set_gradient_divide_factor(1.0)  # meant: sum the ranks' gradients; the root owns no parameter
    yield from _averaged_gradients(kit, found)


def _divide_factor_on_every_unit(kit: RankKit, found: dict[str, Any]) -> Iterator[Snapshot]:
    for unit in kit.units:  # the fix: every unit, and sum-only collectives, which gloo has
        unit.set_gradient_divide_factor(1.0)
        unit.set_force_sum_reduction_for_comms(True)
    yield from _averaged_gradients(kit, found)


def _reshard_off_at_step(kit: RankKit, found: dict[str, Any]) -> Iterator[Snapshot]:
    # Keep the gathered weights between micro-batches, the window's last too: the next window's first forward
    # finds its units gathered and computes with the weights from before the step, not the optimizer's shards.
    kit.root.set_reshard_after_backward(False)
    for samples, micro_batches in kit.windows():
        for x, y in micro_batches:
            (kit.loss_sum(x, y) / (samples / kit.ranks.world_size)).backward()  # the engine's weighting
        # model.parameters() now lists the gathered copies; the optimizer holds the shards, which have .grad.
        found.setdefault("grad_none_at_step", all(p.grad is None for p in kit.model.parameters()))
        yield kit.step(samples)


def _reshard_every_unit(kit: RankKit, found: dict[str, Any]) -> Iterator[Snapshot]:
    kit.root.set_reshard_after_backward(False)
    for samples, micro_batches in kit.windows():
        for x, y in micro_batches:
            (kit.loss_sum(x, y) / (samples / kit.ranks.world_size)).backward()
        for unit in kit.units:  # the fix: resharding sets each unit's sharded .grad
            unit.reshard()
        found.setdefault("grad_none_after_reshard", any(p.grad is None for p in kit.model.parameters()))
        yield kit.step(samples)


LOOPS: dict[str, Loop] = {loop.__name__[1:]: loop for loop in (
    _averaged_gradients, _divide_factor_on_root, _divide_factor_on_every_unit, _reshard_off_at_step,
    _reshard_every_unit)}


def run_cases(config: RunConfig, ranks: Ranks, steps: int) -> dict[str, Any]:
    """Every FSDP run of the gallery on this rank, `steps` optimizer steps each: the engine with the config's
    reshard_after_backward and with it off, each loop of LOOPS, and what set_gradient_divide_factor on every
    unit raises without sum-only collectives (on gloo: PREMUL_SUM)."""
    data = load_data(config)
    model = build_seeded_model(config, data.input_shape, data.num_classes)
    found: dict[str, Any] = {}
    runs = {"engine": _engine_run(config.replace(fsdp_reshard_after_backward="on"), ranks, steps),
            "engine_reshard_off": _engine_run(config.replace(fsdp_reshard_after_backward="off"), ranks, steps)}
    for name, loop in LOOPS.items():
        kit = RankKit(config, ranks, data.train, copy.deepcopy(model), steps)
        runs[name] = _plain(list(itertools.islice(loop(kit, found), steps)))
    found["premul_sum_error"] = _divide_factor_error(copy.deepcopy(model), data.train, config)
    return {"runs": runs, **found}


def _engine_run(config: RunConfig, ranks: Ranks, steps: int) -> dict[str, Any]:
    """`steps` optimizer steps of the engine on this rank (FSDP, the engine's weighting), without evaluation."""
    per_epoch = windows_per_epoch(len(load_data(config).train), config.micro_batch_size * ranks.world_size,
                                  config.accum_steps)
    engine = Engine(config.replace(epochs=-(-steps // per_epoch), max_steps=steps), CPU, ranks)
    sink = SnapshotSink(engine.model)
    engine.run(sink, steps=steps, evaluate=False)
    return _plain(sink.snapshots())


def _divide_factor_error(model: torch.nn.Module, train: ImageSource, config: RunConfig) -> str:
    """What one micro-batch's backward raises with set_gradient_divide_factor(1.0) on every unit ('' if nothing).

    On a group of its own: the failed reduce-scatter leaves its group unusable, and the job's stays healthy."""
    mesh = DeviceMesh.from_group(dist.new_group(backend="gloo"), "cpu")
    units = blocks(model)
    for unit in [*units, model]:
        fully_shard(unit, mesh=mesh)
        unit.set_gradient_divide_factor(1.0)
    x, y = train.batch(torch.arange(config.micro_batch_size))
    try:
        torch.nn.functional.cross_entropy(model(x), y, reduction="sum").backward()
    except RuntimeError as exc:
        return str(exc).strip()
    return ""


def _plain(snapshots: list[Snapshot]) -> dict[str, Any]:
    """A run's snapshots as plain values for the parent: weights (steps x parameters), and lists."""
    return {"weights": torch.stack([s.weights for s in snapshots]), "grad_norm": [s.grad_norm for s in snapshots],
            "loss": [s.loss for s in snapshots], "samples": [s.samples for s in snapshots]}

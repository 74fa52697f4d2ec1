"""Data-parallel runs on torch.distributed: ranks, each rank's share of a window, DDP with a counting
communication hook, and the one small collective per optimizer step that combines the metrics.

A global micro-batch holds world_size * b samples of the epoch order; rank r takes its b-slice
[start + r*b, start + (r+1)*b), clipped to the micro-batch. A partial last window can leave a rank
an empty share: it still runs forward and backward (on zero samples), so it joins the gradient
all-reduce and contributes nothing. DDP averages gradients over ranks, so each rank divides its
summed loss by (global window samples / world_size): the average of the ranks' gradients is then
the sum over the whole window divided by its sample count, the one-big-batch gradient.
"""

from __future__ import annotations

import os
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ContextManager, Iterator, Protocol

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.constants import default_pg_nccl_timeout, default_pg_timeout
from torch.nn.parallel import DistributedDataParallel

from gaccum_core.config import RunConfig
from gaccum_core.train.accumulation import MicroBatch

# How long a rank waits in a collective for the others (init_process_group's timeout; NCCL's watchdog ends the job
# after it). In a data-parallel run rank 0 alone evaluates and writes each checkpoint while the others wait at the
# next collective: the wait allowed is WAIT_FLOOR (gloo's default, three times NCCL's 10 minutes: the checkpoint's
# write, a text model's sample) plus EVAL_S_PER_SAMPLE for each test sample an evaluation reads (a generous bound:
# a sequence of a large model on a slow device), WHOLE_SPLIT_SAMPLES of them with eval_batches 0, the whole test
# split, whose size is known only once the data has loaded (ImageNet's validation split holds 50,000).
WAIT_FLOOR = timedelta(minutes=30)
EVAL_S_PER_SAMPLE = 0.1
WHOLE_SPLIT_SAMPLES = 50_000


@dataclass(frozen=True)
class Ranks:
    """Where this process sits in the job: global rank, world size and rank on this machine."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Global rank 0: the only rank that writes the run directory."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """More than one process."""
        return self.world_size > 1

    @classmethod
    def from_env(cls) -> "Ranks":
        """The ranks torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK); one process without them."""
        return cls(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
                   int(os.environ.get("LOCAL_RANK", 0)))


def worker_device(ranks: Ranks, device: torch.device) -> torch.device:
    """The device of this rank: one GPU per local rank on CUDA, the CPU otherwise."""
    if device.type == "cuda" and ranks.distributed:
        return torch.device("cuda", ranks.local_rank)
    return device


def backend_for(device: torch.device) -> str:
    """The process group's backend: NCCL on CUDA, gloo on the CPU."""
    return "nccl" if device.type == "cuda" else "gloo"


def collective_timeout(config: RunConfig, backend: str) -> timedelta:
    """How long a collective waits for the other ranks: rank 0's evaluation and checkpoint in between (WAIT_FLOOR),
    never less than torch's default for the backend."""
    samples = config.eval_batches * config.micro_batch_size or WHOLE_SPLIT_SAMPLES
    needed = WAIT_FLOOR + timedelta(seconds=samples * EVAL_S_PER_SAMPLE)
    nccl = backend == "nccl" and default_pg_nccl_timeout is not None  # None: a torch built without NCCL
    return max(needed, default_pg_nccl_timeout if nccl else default_pg_timeout)


def init_process_group(ranks: Ranks, device: torch.device, config: RunConfig) -> None:
    """Join the job (rendezvous from torchrun's environment), its collectives waiting collective_timeout."""
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL needs each rank on its own GPU before the first collective
    backend = backend_for(device)
    dist.init_process_group(backend, rank=ranks.rank, world_size=ranks.world_size,
                            timeout=collective_timeout(config, backend))


def share(micro: MicroBatch, ranks: Ranks, micro_batch_size: int) -> tuple[int, int]:
    """This rank's [start, stop) of a global micro-batch; empty (start == stop) when nothing is left."""
    start = min(micro.start + ranks.rank * micro_batch_size, micro.stop)
    return start, min(start + micro_batch_size, micro.stop)


@dataclass
class CollectiveCount:
    """One optimizer step's gradient collectives on this rank: calls and the bytes they carried (DDP's
    all-reduces, FSDP's reduce-scatters and all-gathers)."""

    allreduce_calls: int = 0
    allreduce_bytes: int = 0
    reduce_scatter_calls: int = 0
    reduce_scatter_bytes: int = 0
    all_gather_calls: int = 0
    all_gather_bytes: int = 0

    def reset(self) -> None:
        """Start counting a new optimizer step."""
        for name in self.__dataclass_fields__:
            setattr(self, name, 0)

    def columns(self) -> dict[str, int]:
        """The counts as step-row columns."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


class Parallel(Protocol):
    """How a data-parallel job's model is wrapped and synchronised: DDP (Replicated here) or FSDP (fsdp.Sharded)."""

    module: torch.nn.Module  # what the forward pass calls
    count: CollectiveCount

    def sync(self, ends_window: bool) -> ContextManager[Any]:
        """Around one micro-batch's forward and backward: whether (and how) its gradients are communicated."""

    def reset(self) -> None:
        """Start a new optimizer step's counts."""

    def memory(self) -> dict[str, float]:
        """This rank's step-row memory columns the strategy measures (none for DDP)."""


def _counting_allreduce(count: CollectiveCount, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    count.allreduce_calls += 1
    count.allreduce_bytes += buffer.numel() * buffer.element_size()
    return default_hooks.allreduce_hook(None, bucket)  # DDP's own all-reduce and average


# DDP checks the hook's annotation against the class itself; the module's postponed annotations are strings.
_counting_allreduce.__annotations__.update({"bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]})


class Replicated:
    """The model in DDP (a whole copy per rank), with a hook that counts every gradient all-reduce.

    Each .grad is a view into DDP's communication buckets (gradient_as_bucket_view), so a rank holds one gradient
    copy, the one the planner counts, not .grad and a bucket beside it. DDP makes an existing .grad a view when it
    builds its buckets (at construction, and when it rebuilds them after the first step), and the views stay while
    .grad is zeroed in place; step.py frees .grad after each step (zero_grad(set_to_none=True)), so sync() puts the
    views back, zeroed, before a window's first micro-batch, where autograd would otherwise allocate a second copy."""

    def __init__(self, model: torch.nn.Module, device: torch.device, sync_every: bool) -> None:
        self._trained = [p for p in model.parameters() if p.requires_grad]
        for param in self._trained:  # DDP copies each into its bucket, makes .grad a view of it and frees this
            param.grad = torch.zeros_like(param)
        self.module = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None,
                                              gradient_as_bucket_view=True)
        self._views: list[torch.Tensor | None] = [param.grad for param in self._trained]
        self.count = CollectiveCount()
        self.module.register_comm_hook(self.count, _counting_allreduce)
        self.sync_every = sync_every

    @contextmanager
    def sync(self, ends_window: bool) -> Iterator[None]:
        """no_sync() for every micro-batch but a window's last (unless syncing every micro-batch is asked), with
        .grad the buckets' views."""
        for param, view in zip(self._trained, self._views):
            if param.grad is None and view is not None:
                param.grad = view.zero_()
        self._views = []  # no reference left to a bucket DDP replaces when it rebuilds them
        with nullcontext() if ends_window or self.sync_every else self.module.no_sync():
            yield
        self._views = [param.grad for param in self._trained]

    def reset(self) -> None:
        """Start a new optimizer step's counts."""
        self.count.reset()

    def memory(self) -> dict[str, float]:
        """Nothing beyond what every run measures: DDP's gradients are the model's whole .grad, its buckets."""
        return {}


def share_from_rank0(obj: Any) -> Any:
    """Rank 0's object on every rank (a config, a path; a checkpoint only for a rank that cannot read its file)."""
    shared = [obj]
    dist.broadcast_object_list(shared, src=0)
    return shared[0]


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's object, in rank order, on every rank (each rank's generators for a checkpoint)."""
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def gather_step(values: list[float | torch.Tensor], device: torch.device) -> torch.Tensor:
    """Every rank's values for this step, one row per rank: one small all_gather per optimizer step."""
    mine = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=device).reshape(()) for v in values])
    rows = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, mine)
    return torch.stack(rows)


def combine_ranks(loss_sum: torch.Tensor, grad_norm: torch.Tensor, stop: bool,
                  memory: dict[str, float | None], device: torch.device) -> tuple[dict[str, float | None], bool]:
    """One step's figures over the whole job from one gather_step: the loss sums added, the memory figures
    the largest rank's, and whether any rank asked to stop."""
    names = list(memory)
    nan = float("nan")
    local = [loss_sum, grad_norm.float(), float(stop), *(nan if memory[n] is None else memory[n] for n in names)]
    rows = gather_step(local, device).cpu()
    # The gradients are all-reduced, so every rank's norm is the global one: rank 0's is taken.
    largest = [None if torch.isnan(c).all() else c.nan_to_num(-1.0).max().item() for c in rows[:, 3:].T]
    figures = {"loss_sum": rows[:, 0].sum().item(), "grad_norm": rows[0, 1].item(), **dict(zip(names, largest))}
    return figures, bool(rows[:, 2].max() > 0)

"""One rank of a 2-process DDP check (started by torch.multiprocessing.spawn): gloo on the CPU
(tests/train/test_ddp_buckets_resume.py), NCCL with a GPU per rank (tests/cuda/test_cuda_distributed.py). The process
group joined as the worker joins it; a DDP run whose gradient memory is measured after every micro-batch; then runs
checkpointed and resumed by resume_engine, counting what the process group carried. Each rank saves what it saw into
the directory given, as rank<r>.pt."""

import os
import pickle
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from gaccum_core.config import RunConfig
from gaccum_core.plan.sharding import DDP, MB, layout, per_rank
from gaccum_core.execution import resume
from gaccum_core.runs.store import RunStore
from gaccum_core.train import distributed
from gaccum_core.train.distributed import Ranks, init_process_group, share_from_rank0, worker_device
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper

WORLD = 2

def _storages(tensors: list[torch.Tensor]) -> dict[int, int]:
    return {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}


def gradient_memory(config: RunConfig, ranks: Ranks, device: torch.device) -> dict[str, Any]:
    """Train config with DDP; after each micro-batch, the optimizer steps done, whether it ended its window, the
    .grad tensors set and the bytes of the distinct storages holding them and DDP's buckets (as its communication
    hook last saw them); the parameters' bytes, the gradients the planner counts for a rank, and the trained
    state_dict (on the CPU)."""
    buckets: dict[int, torch.Tensor] = {}
    counting = distributed._counting_allreduce

    def recording(count: distributed.CollectiveCount, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        buckets[bucket.index()] = bucket.buffer()
        return counting(count, bucket)

    distributed._counting_allreduce = recording  # what Replicated registers, read when it is built
    engine = Engine(config, device, ranks)
    sync, held = engine.parallel.sync, []

    @contextmanager
    def measured(ends_window: bool) -> Iterator[None]:
        with sync(ends_window):
            yield
        grads = [p.grad for p in engine.opt.params if p.grad is not None]
        storages = {**_storages(grads), **_storages(list(buckets.values()))}
        held.append((engine.training.counters.step, ends_window, len(grads), sum(storages.values())))

    engine.parallel.sync = measured
    engine.run(RowKeeper(), evaluate=False)
    params = sum(p.numel() * p.element_size() for p in engine.opt.params)
    # What the planner counts for a ddp rank, from this run's parts.
    planned = per_rank(engine.counted.parts(0), layout(engine.model), DDP, ranks.world_size, config.accum_steps)
    trained = {k: v.cpu() for k, v in engine.model.state_dict().items()}
    return {"held": held, "param_bytes": params, "params": len(engine.opt.params), "trained": trained,
            "planned_gradients_mb": planned["gradients_mb"]}


@contextmanager
def counted_receipts() -> Iterator[list[dict[str, Any]]]:
    """What this rank receives from the others through broadcast_object_list and all_gather_object: each object's
    pickled bytes and whether it holds a tensor."""
    received: list[dict[str, Any]] = []
    broadcast, all_gather = dist.broadcast_object_list, dist.all_gather_object

    def note(obj: Any) -> None:
        received.append({"bytes": len(pickle.dumps(obj)), "tensor": _holds_tensor(obj)})

    def counting_broadcast(objects: list[Any], src: int = 0, **kw: Any) -> None:
        broadcast(objects, src=src, **kw)
        if dist.get_rank() != src:
            for obj in objects:
                note(obj)

    def counting_all_gather(out: list[Any], obj: Any, **kw: Any) -> None:
        all_gather(out, obj, **kw)
        for rank, got in enumerate(out):
            if rank != dist.get_rank():
                note(got)

    dist.broadcast_object_list, dist.all_gather_object = counting_broadcast, counting_all_gather
    try:
        yield received
    finally:
        dist.broadcast_object_list, dist.all_gather_object = broadcast, all_gather


def _holds_tensor(obj: Any) -> bool:
    if torch.is_tensor(obj):
        return True
    if isinstance(obj, dict):
        return any(_holds_tensor(v) for v in obj.values())
    return isinstance(obj, (list, tuple)) and any(_holds_tensor(v) for v in obj)


def resumed(config: RunConfig, ranks: Ranks, device: torch.device, runs_dir: Path, other_file: bool) -> dict[str, Any]:
    """Train config 2 steps and checkpoint it (rank 0 writes checkpoint.pt), then resume a new engine from it with
    resume_engine: what this rank received meanwhile, the checkpoint's size, and whether the resumed parameters are
    the trained ones. other_file: rank 1 finds another file at rank 0's path (a machine of its own)."""
    store = RunStore(runs_dir) if ranks.is_main else None
    run_id = share_from_rank0(store.create(config) if store is not None else None)
    trained = Engine(config, device, ranks)
    trained.run(RowKeeper(), steps=2, evaluate=False)
    state = trained.checkpoint()  # every rank takes part (its generators)
    if store is not None:
        resume.run_checkpoints(store, run_id).save(state)
    size = share_from_rank0(os.path.getsize(store.checkpoint_path(run_id)) if store is not None else 0)
    fresh = Engine(config, device, ranks)
    restore: Callable[[Path], str] = resume.file_sha256
    if other_file and not ranks.is_main:
        resume.file_sha256 = lambda path: "0" * 64  # noqa: E731  another file than rank 0's
    try:
        with counted_receipts() as received:
            resume.resume_engine(store, run_id, fresh, ranks)
    finally:
        resume.file_sha256 = restore
    same = all(torch.equal(a, b) for a, b in zip(trained.model.state_dict().values(),
                                                   fresh.model.state_dict().values()))
    return {"received": received, "checkpoint_bytes": size, "same": same, "step": fresh.training.counters.step}


def group_timeout_s(device: torch.device) -> float:
    """The default process group's timeout, as its backend for the device (gloo, NCCL) holds it."""
    group = dist.distributed_c10d._get_default_group()
    return group._get_backend(device).options._timeout.total_seconds()


def main(rank: int, world_size: int, out_dir: str, port: int, device_type: str, memory: RunConfig,
         resumes: dict[str, tuple[RunConfig, bool]]) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    ranks = Ranks(rank, world_size, rank)
    device = worker_device(ranks, torch.device(device_type))  # a GPU per rank on CUDA
    init_process_group(ranks, device, memory)
    try:
        seen = {"timeout_s": group_timeout_s(device), "memory": gradient_memory(memory, ranks, device)}
        for name, (config, other_file) in resumes.items():
            seen[name] = resumed(config, ranks, device, Path(out_dir) / name, other_file)
        torch.save(seen, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def resume_cases(config: RunConfig) -> dict[str, tuple[RunConfig, bool]]:
    """The resumes checked, from config on one machine: there; on WORLD machines of a rank each, sharing the runs
    directory; and with a runs directory of their own (rank 1 finds another file at rank 0's path)."""
    across = config.replace(nproc=1, nnodes=WORLD)
    return {"one_machine": (config, False), "shared_runs_dir": (across, False), "own_runs_dir": (across, True)}


def seen_by_ranks(out_dir: Path, device_type: str, memory: RunConfig, resumed_config: RunConfig,
                  timeout_s: float) -> list[dict[str, Any]]:
    """main on WORLD spawned ranks (memory trained, resume_cases(resumed_config) resumed): what each saw, by rank."""
    from chromium import free_port
    from spawned import run_ranks

    cases = resume_cases(resumed_config)
    run_ranks(main, WORLD, (WORLD, str(out_dir), free_port(), device_type, memory, cases), timeout_s)
    return [torch.load(out_dir / f"rank{rank}.pt", weights_only=False) for rank in range(WORLD)]

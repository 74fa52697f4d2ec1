"""One rank of test_fsdp's GradScaler check (started by torch.multiprocessing.spawn): one fp16 sharded step, rank
1's own part of the gradient poisoned with an inf before the step; each rank saves what its step did into the
directory given."""

import os
import sys

import torch
import torch.distributed as dist

from gaccum_core.config import RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.models.build import build_seeded_model
from gaccum_core.train.distributed import Ranks
from gaccum_core.train.fsdp import Sharded, local
from gaccum_core.train.loss import summed_cross_entropy
from gaccum_core.train.step import Optimization

B = 4


def main(rank: int, world_size: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    ranks = Ranks(rank, world_size, rank)
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/store", rank=rank, world_size=world_size)
    try:
        config = RunConfig(model="mlp", dataset="fake", image_size=8, fake_samples=118, fake_classes=10,
                           micro_batch_size=B, nproc=ranks.world_size, device="cpu", sharding="fsdp", amp="fp16")
        data = load_data(config)
        model = build_seeded_model(config, data.input_shape, data.num_classes)
        sharded = Sharded(model, config)
        opt = Optimization.from_config(config, model, torch.device("cpu"), 10)
        x, y = data.train.batch(torch.arange(ranks.rank * B, (ranks.rank + 1) * B))
        with sharded.sync(ends_window=True):  # the engine's weighting: summed loss * N / window samples
            opt.precision.backward(summed_cross_entropy(model, opt.precision, x, y) / B)
        before = [local(p).detach().clone() for p in opt.params]
        if ranks.rank == 1:
            local(opt.params[0].grad).view(-1)[0] = float("inf")  # only this rank's part of the first weight
        outcome = opt.precision.step(opt.optimizer, opt.params, 0.0)
        unchanged = all(torch.equal(b, local(p)) for b, p in zip(before, opt.params))
        torch.save({"skipped": outcome.skipped, "unchanged": unchanged, "scale": opt.precision.scaler.get_scale(),
                    "scale_before": outcome.scale}, f"{out_dir}/rank{ranks.rank}.pt")
    finally:
        dist.destroy_process_group()
    # Saved: skip the interpreter's teardown, where gloo's threads sometimes abort the process (SIGABRT,
    # "terminate called without an active exception"); the run worker skips it too.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

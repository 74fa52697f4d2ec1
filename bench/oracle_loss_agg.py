"""The loss aggregation modes' oracle table: for each task (sft, pg), layout (padded, packed) and mode that applies,
the largest |Δθ| between b·k accumulated (reduction mean) and one batch of b·k on the same records, and the
textbook's (mean_per_micro_batch) beside it, after an epoch of the bundled records (its last window partial).

gpt (tiny), fp32, SGD, no evaluation, dropout off; each run from the weights the seed gives, in one process.

    python bench/oracle_loss_agg.py [--micro-batch-size 4] [--accum-steps 4] [--max-seq-len 128] [--steps 0]
        [--lr 0.1] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch

from gaccum_core.config import RunConfig
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper
from gaccum_core.values import loss_aggs_for

# seq-mean-token-sum's gradient is about a completion's length times a mean's: its lr is divided by this, so that
# every mode takes steps of a like size (at --lr it diverges).
SUM_SCALE = 50


def weights(config: RunConfig) -> tuple[torch.Tensor, list[int]]:
    """Every parameter after the run, flat, and each step's samples."""
    engine = Engine(config)
    rows = RowKeeper()
    engine.run(rows, evaluate=False)
    return torch.cat([p.detach().flatten() for p in engine.model.parameters()]), [r["samples"] for r in rows.steps]


def measure(base: RunConfig) -> dict:
    """One cell: the accumulated and the textbook runs against the big batch."""
    b, k = base.micro_batch_size, base.accum_steps
    big, _ = weights(base.replace(micro_batch_size=b * k, accum_steps=1))
    accumulated, samples = weights(base)
    textbook, _ = weights(base.replace(reduction="mean_per_micro_batch"))
    return {"exact": (accumulated - big).abs().max().item(), "textbook": (textbook - big).abs().max().item(),
            "steps": len(samples), "last_window": samples[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--accum-steps", type=int, default=4)
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=0, help="0: one epoch, its last window partial")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cells, started = [], time.perf_counter()
    print(f"b={args.micro_batch_size} k={args.accum_steps}, gpt tiny, fp32, SGD lr {args.lr:g} (seq-mean-token-sum: "
          f"{args.lr / SUM_SCALE:g}), max_seq_len "
          f"{args.max_seq_len}; max |Δθ| against one batch of b·k")
    print(f"{'task':5} {'layout':7} {'mode':26} {'steps':>5} {'last':>4} {'exact':>9} {'textbook':>9}")
    with tempfile.TemporaryDirectory() as cache:
        for dataset in ("sft", "pg"):
            for packing in ("off", "on"):
                for mode in loss_aggs_for(dataset):
                    lr = args.lr / SUM_SCALE if mode == "seq-mean-token-sum" else args.lr
                    config = RunConfig(model="gpt", dataset=dataset, device="cpu", optimizer="sgd", lr=lr,
                                       micro_batch_size=args.micro_batch_size, accum_steps=args.accum_steps,
                                       max_seq_len=args.max_seq_len, packing=packing, loss_agg=mode, epochs=1,
                                       max_steps=args.steps, no_dropout=True, eval_every=10**9, checkpoint_every=0,
                                       tensorboard="off", cache_dir=cache)
                    cell = {"dataset": dataset, "packing": packing, "loss_agg": mode, **measure(config)}
                    cells.append(cell)
                    layout = "packed" if packing == "on" else "padded"
                    print(f"{dataset:5} {layout:7} {mode:26} {cell['steps']:>5} {cell['last_window']:>4} "
                          f"{cell['exact']:>9.1e} {cell['textbook']:>9.1e}", flush=True)
    print(f"largest exact |Δθ| {max(c['exact'] for c in cells):.1e}; smallest textbook |Δθ| "
          f"{min(c['textbook'] for c in cells):.1e}; {time.perf_counter() - started:.0f} s")
    if args.json:
        print(json.dumps(cells))


if __name__ == "__main__":
    main()

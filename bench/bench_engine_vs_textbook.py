"""Throughput of the engine (every metric recorded to CSV) against the textbook accumulation loop.

The textbook loop is what every tutorial writes: loss / k, backward, optimizer.step() and
zero_grad() every k micro-batches and at the end of the epoch, nothing measured. Both see the same
model, initial weights, data, sample order, b and k on the CPU; they alternate, and the figure is
the median over the repeats of samples/s (engine) / samples/s (textbook).

    python bench/bench_engine_vs_textbook.py [--model cnn] [--micro-batch-size 32] [--accum-steps 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gaccum_core.accumulation import epoch_order  # noqa: E402
from gaccum_core.config import RunConfig  # noqa: E402
from gaccum_core.engine import Engine  # noqa: E402
from gaccum_core.store import RunStore  # noqa: E402


def textbook_epochs(config: RunConfig) -> tuple[int, float]:
    """The tutorial loop; returns (samples, seconds)."""
    engine = Engine(config)  # only for its identical model, data and optimizer
    model, data, optimizer = engine.model, engine.data.train, engine.optimizer
    k, b, n = config.accum_steps, config.micro_batch_size, len(engine.data.train)
    start = time.perf_counter()
    for epoch in range(config.epochs):
        order = epoch_order(n, config.seed, epoch)
        num_micro = -(-n // b)
        for i in range(num_micro):
            x, y = data.batch(order[i * b:(i + 1) * b])
            loss = F.cross_entropy(model(x), y) / k
            loss.backward()
            if (i + 1) % k == 0 or i + 1 == num_micro:
                optimizer.step()
                optimizer.zero_grad()
    return n * config.epochs, time.perf_counter() - start


def engine_epochs(config: RunConfig, runs_dir: Path) -> tuple[int, float]:
    """The engine with every metric recorded to a run's CSV files; returns (samples, seconds)."""
    store = RunStore(runs_dir)
    run_id = store.create(config)
    engine = Engine(config)
    writer = store.writer(run_id)
    start = time.perf_counter()
    engine.run(writer)
    seconds = time.perf_counter() - start
    writer.close()
    rows = store.read_metrics(run_id)
    assert rows["samples"].sum() == len(engine.data.train) * config.epochs
    return int(rows["samples"].sum()), seconds


def main() -> None:
    """Alternate both loops and print samples/s and the engine/textbook ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--micro-batch-size", type=int, default=32)
    parser.add_argument("--accum-steps", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    config = RunConfig(model=args.model, micro_batch_size=args.micro_batch_size, accum_steps=args.accum_steps,
                       epochs=args.epochs, device="cpu", eval_every=10**9)
    print(f"model={config.model} dataset={config.dataset} b={config.micro_batch_size} k={config.accum_steps} "
          f"epochs={config.epochs} threads={torch.get_num_threads()} torch={torch.__version__}")
    textbook_epochs(config)  # warm-up: first-touch allocations, lazy init
    ratios = []
    with tempfile.TemporaryDirectory() as runs_dir:
        for repeat in range(args.repeats):
            order = (textbook_epochs, engine_epochs) if repeat % 2 == 0 else (engine_epochs, textbook_epochs)
            rates = {}
            for fn in order:
                samples, seconds = fn(config) if fn is textbook_epochs else fn(config, Path(runs_dir))
                rates[fn.__name__] = samples / seconds
            ratio = rates["engine_epochs"] / rates["textbook_epochs"]
            ratios.append(ratio)
            print(f"repeat {repeat + 1}: textbook {rates['textbook_epochs']:9.1f} samples/s   "
                  f"engine {rates['engine_epochs']:9.1f} samples/s   ratio {ratio:.3f}")
    print(f"median ratio engine/textbook over {len(ratios)} repeats: {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}; target >= 0.97)")


if __name__ == "__main__":
    main()

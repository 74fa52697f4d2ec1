"""Throughput of the engine (every metric recorded to CSV) against the textbook accumulation loop.

The textbook loop is what every tutorial writes: loss / k, backward, optimizer.step() and
zero_grad() every k micro-batches and at the end of the epoch, then a test loop after each epoch;
nothing else is measured. The engine evaluates after each epoch too (its default). Both see the same
model, initial weights, data, sample order, b and k on the CPU; they alternate, and the figure is
the median over the repeats of samples/s (engine) / samples/s (textbook). Shared virtual machines
drift by tens of percent over seconds, so each repeat is short (one epoch by default), the pair
runs back to back on one pinned core, and CPU-time ratios are printed beside wall-clock ones.

With --device cuda both run on the GPU (the engine through RunConfig.device, the textbook loop's model
and batches moved there), every clock read after torch.cuda.synchronize(); pinning, --threads and the
CPU-time ratios are CPU-only and skipped. --json ends the output with one JSON line of the figures.

    python bench/bench_engine_vs_textbook.py [--model cnn --image-size 32] [--micro-batch-size 32]
        [--accum-steps 4] [--processes 4 --repeats 6] [--device cpu|cuda|cuda:N] [--json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gaccum_core.train.accumulation import epoch_order  # noqa: E402
from gaccum_core.config import RunConfig  # noqa: E402
from gaccum_core.train.engine import Engine  # noqa: E402
from gaccum_core.runs.store import RunStore  # noqa: E402
from common import (add_device_flags, chosen_device, clock, headline, print_json, quartile_values,  # noqa: E402
                    quartiles, quiet_cpu, say_skipped)


def textbook_epochs(config: RunConfig) -> tuple[int, float, float]:
    """The tutorial loop (stopping after max_steps optimizer steps when set, then testing);
    returns (samples, wall seconds, CPU seconds)."""
    engine = Engine(config)  # only for its identical model, data and optimizer
    model, data, optimizer, device = engine.model, engine.data.train, engine.optimizer, engine.device
    k, b, n = config.accum_steps, config.micro_batch_size, len(engine.data.train)
    steps, samples = 0, 0
    start, cpu = clock(device), time.thread_time()
    for epoch in range(config.epochs):
        order = epoch_order(n, config.seed, epoch)
        num_micro = -(-n // b)
        for i in range(num_micro):
            x, y = data.batch(order[i * b:(i + 1) * b])
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(model(x), y) / k
            loss.backward()
            samples += len(y)
            if (i + 1) % k == 0 or i + 1 == num_micro:
                optimizer.step()
                optimizer.zero_grad()
                steps += 1
                if steps == config.max_steps:
                    break
        _test_loop(model, engine.data.test, b, device)
        if steps == config.max_steps:
            break
    return samples, clock(device) - start, time.thread_time() - cpu


def _test_loop(model: torch.nn.Module, test, batch_size: int, device: torch.device) -> float:
    """The tutorials' test loop: mean loss and accuracy over the test split."""
    model.eval()
    loss, correct = 0.0, 0.0
    with torch.no_grad():
        for begin in range(0, len(test), batch_size):
            x, y = test.batch(torch.arange(begin, min(begin + batch_size, len(test))))
            x, y = x.to(device), y.to(device)
            pred = model(x)
            loss += F.cross_entropy(pred, y, reduction="sum").item()
            correct += (pred.argmax(1) == y).sum().item()
    model.train()
    return correct / len(test)


def engine_epochs(config: RunConfig, runs_dir: Path) -> tuple[int, float, float]:
    """The engine with every metric recorded to a run's CSV files; returns (samples, wall s, CPU s)."""
    store = RunStore(runs_dir)
    run_id = store.create(config)
    engine = Engine(config)
    writer = store.writer(run_id)
    start, cpu = clock(engine.device), time.thread_time()
    engine.run(writer)
    seconds, cpu_seconds = clock(engine.device) - start, time.thread_time() - cpu
    writer.close()
    rows = store.read_metrics(run_id)
    return int(rows["samples"].sum()), seconds, cpu_seconds


def _pairs(config: RunConfig, repeats: int, warm_up: bool = True) -> list[tuple[float, float, float, float]]:
    """Alternate both loops `repeats` times in this process (after a warm-up pair unless warm_up is False):
    (textbook, engine) samples/s by wall clock and by CPU time."""
    out = []
    with tempfile.TemporaryDirectory() as runs_dir:
        if warm_up:
            textbook_epochs(config), engine_epochs(config, Path(runs_dir))  # lazy init, first touch
        for repeat in range(repeats):
            if repeat % 2:
                (n_e, w_e, c_e), (n_t, w_t, c_t) = engine_epochs(config, Path(runs_dir)), textbook_epochs(config)
            else:
                (n_t, w_t, c_t), (n_e, w_e, c_e) = textbook_epochs(config), engine_epochs(config, Path(runs_dir))
            out.append((n_t / w_t, n_e / w_e, n_t / c_t, n_e / c_e))
    return out


def main() -> None:
    """Alternate both loops in several fresh processes; print samples/s and the engine/textbook ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--image-size", type=int, default=32, help="digits upscaled to CIFAR's 32x32")
    parser.add_argument("--micro-batch-size", type=int, default=32)
    parser.add_argument("--accum-steps", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=1, help="epochs per repeat")
    parser.add_argument("--max-steps", type=int, default=0, help="optimizer steps per repeat (0 = whole epochs)")
    parser.add_argument("--repeats", type=int, default=6, help="alternations per process")
    parser.add_argument("--processes", type=int, default=4,
                        help="fresh processes: memory layout differs per process and shifts kernel speed by ~10%%")
    parser.add_argument("--threads", type=int, default=1, help="torch threads; 1 keeps a shared 2-core box quiet")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 1 process, 2 repeats of 2 steps, no warm-up pair")
    add_device_flags(parser)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.processes, args.repeats, args.max_steps = 1, 2, 2
    device = chosen_device(args.device)
    config = RunConfig(model=args.model, image_size=args.image_size, micro_batch_size=args.micro_batch_size,
                       accum_steps=args.accum_steps, epochs=args.epochs, max_steps=args.max_steps,
                       device=str(device))
    if args.worker:
        quiet_cpu(device, args.threads)
        print(json.dumps(_pairs(config, args.repeats, warm_up=not args.quick)))
        return
    print(f"model={config.model} image_size={config.image_size} dataset={config.dataset} b={config.micro_batch_size} k={config.accum_steps} "
          f"epochs/repeat={config.epochs} max_steps/repeat={config.max_steps} threads={args.threads} processes={args.processes} "
          f"repeats/process={args.repeats} torch={torch.__version__} device={device}")
    _report(config, device, args)


def _report(config: RunConfig, device: torch.device, args: argparse.Namespace) -> None:
    """Run the worker processes; print each repeat, the medians and (--json) the JSON line."""
    on_cpu = device.type == "cpu"
    say_skipped(device, "pinning to one core, --threads, the CPU-time ratios")
    wall, cpu, rates = [], [], {"textbook": [], "engine": []}
    for process in range(args.processes):
        done = subprocess.run([sys.executable, __file__, "--worker", *sys.argv[1:]],
                              capture_output=True, text=True, check=True)
        for t_wall, e_wall, t_cpu, e_cpu in json.loads(done.stdout.strip().splitlines()[-1]):
            wall.append(e_wall / t_wall)
            cpu.append(e_cpu / t_cpu)
            rates["textbook"].append(t_wall)
            rates["engine"].append(e_wall)
            print(f"process {process + 1} repeat: textbook {t_wall:8.0f} samples/s   engine {e_wall:8.0f} samples/s"
                  f"   ratio {wall[-1]:.3f}" + (f"   (CPU-time ratio {cpu[-1]:.3f})" if on_cpu else ""))
    print(f"median ratio engine/textbook, wall clock, over {len(wall)} repeats: {statistics.median(wall):.3f} "
          f"(quartiles {quartiles(wall)}; target >= 0.97)")
    if on_cpu:
        print(f"median ratio engine/textbook, CPU time:                  {statistics.median(cpu):.3f} "
              f"(quartiles {quartiles(cpu)})")
    if args.json:
        print_json(headline("engine_vs_textbook", device, model=config.model, b=config.micro_batch_size,
                            k=config.accum_steps, repeats=len(wall), ratio_median=statistics.median(wall),
                            ratio_quartiles=quartile_values(wall),
                            cpu_time_ratio_median=statistics.median(cpu) if on_cpu else None,
                            engine_samples_per_s=statistics.median(rates["engine"]),
                            textbook_samples_per_s=statistics.median(rates["textbook"])))


if __name__ == "__main__":
    main()

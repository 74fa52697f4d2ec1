"""Activation checkpointing's price and gain: samples/s and counted activation MB, off against selective and full.

Two models on the bundled pydoc text, on the CPU: gpt (--preset, mini by default) and a tiny Llama-style
hf: model with its BPE tokenizer (hf:tiny, built in a temporary directory by bench_lm_vs_textbook's
function; or any hf:DIR). For each model and each micro-batch size b (--batch-sizes, 4 and 16) three
variants differ only in RunConfig.activation_checkpointing: off, selective (every --ac-every-th block,
from the first) and full (every block). Each variant is a fresh Engine (same seed, so the same initial
weights and samples) run through Engine.run with a sink that keeps its step rows, no evaluation: one
warm-up step (lazy initialisation; it is also the step in which the engine counts the activations,
once per micro-batch size), then --steps measured steps.

From the step rows: samples/s is the measured steps' samples over their step_time_s, and activation MB is
the activation_mb column (the peak of the bytes autograd holds for backward during a micro-batch, as
the engine counts them: train/memory.py), read as recorded.

The machine's speed drifts (a shared 2-core box), so the variants alternate in rounds: each round runs
every variant once, the (model, b) groups and the modes within each group in an order rotated by one
every round, and each variant's speed is a ratio to off's of the same model and b in the same round.
The table shows the median over the rounds of those ratios (quartiles when there are 4 rounds or more),
the median samples/s, and the activation MB with its ratio to off's.

With --device cuda the variants run on the GPU (--threads is CPU-only and skipped) and the table's last
column is the allocator's peak (the mem_peak_mb column: torch.cuda.max_memory_allocated since the step's
start), the largest over the measured steps, median over the rounds; it reads "-" on the CPU. --json ends
the output with one JSON line of every row's figures.

    .venv/bin/python bench/bench_activation_checkpointing.py [--preset mini] [--models gpt,hf:tiny]
        [--batch-sizes 4,16] [--accum-steps 1] [--max-seq-len 128] [--steps 10] [--rounds 5]
        [--ac-every 2] [--threads 1] [--device cpu|cuda|cuda:N] [--json] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_lm_vs_textbook import _tiny_hf_model  # noqa: E402
from gaccum_core.config import AC_MODES, RunConfig, is_hf  # noqa: E402
from gaccum_core.presets import GPT_PRESETS, preset_words  # noqa: E402
from gaccum_core.train.engine import Engine  # noqa: E402
from gaccum_core.train.metrics import RowKeeper  # noqa: E402
from common import (add_device_flags, chosen_device, headline, load_average, print_json, quiet_cpu,  # noqa: E402
                    say_skipped)

TINY_HF = "hf:tiny"


@dataclass(frozen=True)
class Variant:
    """One measured configuration: a model, a micro-batch size, a checkpointing mode."""

    model: str  # the RunConfig.model (hf:DIR with the directory built)
    label: str  # how the table names the model
    b: int
    mode: str


@dataclass(frozen=True)
class Measured:
    """One variant's run in one round."""

    samples_per_s: float
    activation_mb: float
    steps: int
    peak_mb: float | None  # the CUDA allocator's peak over the measured steps; None on the CPU


def measure(config: RunConfig, steps: int) -> Measured:
    """A fresh Engine: one warm-up step, then `steps` steps timed by the engine's own step rows."""
    sink = RowKeeper()
    Engine(config).run(sink, steps=1 + steps, evaluate=False)
    rows = sink.steps[1:]
    if len(rows) != steps:
        raise RuntimeError(f"{config.model} b={config.micro_batch_size} {config.activation_checkpointing}: "
                           f"{len(sink.steps)} step rows, expected {1 + steps}")
    seconds = sum(row["step_time_s"] for row in rows)
    peak = max(row["mem_peak_mb"] for row in rows) if torch.device(config.device).type == "cuda" else None
    return Measured(sum(row["samples"] for row in rows) / seconds,
                    max(row["activation_mb"] for row in sink.steps), len(rows), peak)


def rotated(items: list, by: int) -> list:
    """items starting at index `by` (mod their count), wrapping around."""
    by %= len(items)
    return items[by:] + items[:by]


def spread(values: list[float], digits: int) -> str:
    """'M' or, from 4 values on, 'M (Q1–Q3)'."""
    median = f"{statistics.median(values):.{digits}f}"
    if len(values) < 4:
        return median
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{median} ({q1:.{digits}f}–{q3:.{digits}f})"


def table(variants: list[Variant], runs: dict[Variant, list[Measured]], speed: dict[Variant, list[float]],
          memory: dict[Variant, list[float]]) -> str:
    """The Markdown table: one row per variant, medians over the rounds."""
    header = ("| model | b | checkpointing | samples/s (median) | × off (median ratio) | activation MB "
              "| × off | allocator peak MB (CUDA) |")
    lines = [header, "|---" * (header.count("|") - 1) + "|"]
    for v in variants:
        rate = statistics.median(m.samples_per_s for m in runs[v])
        activation = statistics.median(m.activation_mb for m in runs[v])
        peak = allocator_peak(runs[v])
        lines.append(f"| {v.label} | {v.b} | {v.mode} | {rate:.1f} | {spread(speed[v], 3)} | {activation:.2f} "
                     f"| {statistics.median(memory[v]):.3f} | {'-' if peak is None else f'{peak:.1f}'} |")
    return "\n".join(lines)


def allocator_peak(runs: list[Measured]) -> float | None:
    """The median over the rounds of the allocator's peak MB; None on the CPU."""
    peaks = [m.peak_mb for m in runs if m.peak_mb is not None]
    return statistics.median(peaks) if peaks else None


def figures(variants: list[Variant], runs: dict[Variant, list[Measured]], speed: dict[Variant, list[float]],
            memory: dict[Variant, list[float]]) -> list[dict]:
    """The table's rows as the JSON line's: medians over the rounds."""
    return [{"model": v.label, "b": v.b, "mode": v.mode,
             "samples_per_s": statistics.median(m.samples_per_s for m in runs[v]),
             "speed_ratio": statistics.median(speed[v]),
             "activation_mb": statistics.median(m.activation_mb for m in runs[v]),
             "activation_ratio": statistics.median(memory[v]), "peak_mb": allocator_peak(runs[v])}
            for v in variants]


def label_of(model: str, preset: str) -> str:
    """How the table names a --models entry (SystemExit for one that is none of them)."""
    if model == "gpt":
        return f"gpt {preset}"
    if model == TINY_HF:
        return "hf tiny Llama"
    if is_hf(model):
        return f"hf {Path(model[len('hf:'):]).name}"
    raise SystemExit(f"--models: {model!r} is none of gpt, hf:DIR, {TINY_HF}")


def parse() -> argparse.Namespace:
    """The command line; --quick shrinks the run to a smoke test."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="mini", choices=list(GPT_PRESETS), help="gpt preset")
    parser.add_argument("--models", default=f"gpt,{TINY_HF}",
                        help=f"comma-separated: gpt, hf:DIR, {TINY_HF} (a tiny Llama built here)")
    parser.add_argument("--batch-sizes", default="4,16", help="comma-separated micro-batch sizes b")
    parser.add_argument("--accum-steps", type=int, default=1, help="k: checkpointing acts per micro-batch")
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--ac-every", type=int, default=2, help="selective checkpoints every N-th block")
    parser.add_argument("--steps", type=int, default=10, help="measured optimizer steps per variant per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each running every variant once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads; 1 keeps a shared 2-core box quiet")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 1 measured step")
    add_device_flags(parser)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.steps = 1, 1
    if args.steps < 1 or args.rounds < 1:
        parser.error("--steps and --rounds must be at least 1")
    return args


def run_rounds(groups: list[tuple[str, str, int]], base: RunConfig, rounds: int, steps: int) -> tuple[
        dict[Variant, list[Measured]], dict[Variant, list[float]], dict[Variant, list[float]]]:
    """Every variant once per round, alternated; each run printed. (runs, speed and activation MB ratios to off's)."""
    variants = [Variant(model, label, b, mode) for model, label, b in groups for mode in AC_MODES]
    runs: dict[Variant, list[Measured]] = {v: [] for v in variants}
    speed: dict[Variant, list[float]] = {v: [] for v in variants}
    memory: dict[Variant, list[float]] = {v: [] for v in variants}
    for round_ in range(rounds):
        for model, label, b in rotated(groups, round_):
            this_round = {}
            for mode in rotated(list(AC_MODES), round_):
                v = Variant(model, label, b, mode)
                config = base.replace(model=model, micro_batch_size=b, activation_checkpointing=mode)
                this_round[mode] = m = measure(config, steps)
                runs[v].append(m)
                peak = "" if m.peak_mb is None else f", allocator peak {m.peak_mb:8.1f} MB"
                print(f"round {round_ + 1} {label} b={b} {mode:<9} {m.samples_per_s:8.1f} samples/s over "
                      f"{m.steps} step(s), activation {m.activation_mb:8.2f} MB{peak}", flush=True)
            off = this_round["off"]
            for mode, m in this_round.items():
                v = Variant(model, label, b, mode)
                speed[v].append(m.samples_per_s / off.samples_per_s)
                memory[v].append(m.activation_mb / off.activation_mb)
    return runs, speed, memory


def main() -> None:
    """Run every variant --rounds times, alternated; print each run and the table."""
    args = parse()
    device = chosen_device(args.device)
    began = time.perf_counter()
    quiet_cpu(device, args.threads)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    labels = [label_of(model, args.preset) for model in models]
    built = _tiny_hf_model() if TINY_HF in models else None
    try:
        named = [(built if model == TINY_HF else model, label) for model, label in zip(models, labels)]
        groups = [(model, label, b) for model, label in named for b in sizes]
        base = RunConfig(model="gpt", gpt_preset=args.preset, dataset="pydoc", max_seq_len=args.max_seq_len,
                         accum_steps=args.accum_steps, optimizer="adamw", lr=1e-3, ac_every=args.ac_every,
                         eval_every=10**9, checkpoint_every=0, device=str(device))
        described = ", ".join(f"gpt {preset_words(args.preset)}" if model == "gpt" else label for model, label in named)
        print(f"{described} on pydoc, max_seq_len={args.max_seq_len}, "
              f"b in {sizes}, k={args.accum_steps}, checkpointing {'/'.join(AC_MODES)} (selective: "
              f"ac_every={args.ac_every}), adamw; 1 warm-up + {args.steps} measured steps per variant, {args.rounds} "
              f"round(s); {args.threads} torch thread(s), torch {torch.__version__}; {load_average()}; "
              f"device {device}", flush=True)
        say_skipped(device, "--threads")
        runs, speed, memory = run_rounds(groups, base, args.rounds, args.steps)
        variants = list(runs)  # every model × b × mode, in the table's order
        print(f"\n{table(variants, runs, speed, memory)}\n")
        print(f"{load_average()}; bench wall time {time.perf_counter() - began:.0f} s", flush=True)
        if args.json:
            print_json(headline("activation_checkpointing", device, rounds=args.rounds, steps=args.steps,
                                rows=figures(variants, runs, speed, memory)))
    finally:
        if built is not None:
            shutil.rmtree(Path(built[3:]).parent, ignore_errors=True)


if __name__ == "__main__":
    main()

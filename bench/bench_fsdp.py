"""FSDP against DDP on the CPU (gloo, 2 processes under torchrun) through the product's own path.

Every run is a RunConfig submitted to a Runner, as the dashboard does (a data-parallel run always goes
through torchrun; the thread executor keeps no spare worker that could compete for the cores). Five
configurations share everything else (gpt --preset on pydoc, seed, b, k, optimizer, steps):

    ddp                 sharding ddp (no_sync inside each window: the gradients all-reduced once, in DDP's buckets)
    fsdp/every/reshard  sharding fsdp, fsdp_sync every (reduce-scatter after each micro-batch), reshard on
    fsdp/every/keep     ... fsdp_reshard_after_backward off (gathered weights kept between micro-batches)
    fsdp/last/reshard   sharding fsdp, fsdp_sync last (one reduce-scatter per unit per window), reshard on
    fsdp/last/keep      ... fsdp_reshard_after_backward off

Each run trains --steps optimizer steps (no evaluation until the end, checkpoint only at the end). From
its metrics.csv: samples/s is the median of the samples_per_s column over the steps after the first
--skip-steps (a step's time on rank 0: its micro-batches, the collectives, the optimizer step, the
metrics' all_gather); train_mem_mb (weights + gradients + optimizer state + activations counted per
rank, the largest rank's), mem_peak_mb (the largest rank's peak RSS, over the counted steps) and
grad_kept_mb (gradient MB a rank holds between micro-batches) are their largest values over those
steps; the collectives' calls and bytes per step are medians over full windows.

The machine's speed drifts (2x on a shared box), so the configurations alternate within each round
(the order reverses every round) and each one's speed is given as a ratio to ddp's in the same round;
the table shows the median of those ratios (quartiles over the rounds) and the absolute medians.

Exactness check: every configuration trains on the same samples from the same initial weights, so its
training loss must equal ddp's in the same round, step by step, up to float rounding: the gradients are
summed in another order (FSDP reduce-scatters per unit, and with fsdp_sync every per micro-batch), which
changes the last bits, and training (AdamW most) lets that grow over the steps. The bench prints the
largest relative difference |loss - ddp's| / ddp's at step 2 (after one update) and at the last step,
and checks the last against --tolerance (default 1e-5).

    python bench/bench_fsdp.py [--repeats 3] [--preset mini] [--steps 30] [--micro-batch-size 4]
        [--accum-steps 4] [--max-seq-len 128] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gaccum_core.config import RunConfig  # noqa: E402
from gaccum_core.presets import GPT_PRESETS, preset_words  # noqa: E402
from gaccum_core.execution.runner import Runner  # noqa: E402
from gaccum_core.states import RunState  # noqa: E402
from common import load_average  # noqa: E402

EVAL_ONLY_AT_END = 10**9  # eval_every: no evaluation between steps
MANY_EPOCHS = 1000  # runs end at --steps, never by running out of epochs
COLLECTIVES = ("reduce_scatter", "all_gather", "allreduce")

# (sharding, fsdp_sync, fsdp_reshard_after_backward) of each configuration, ddp first: the reference.
CONFIGURATIONS = {
    "ddp": ("ddp", "every", "on"),
    "fsdp/every/reshard": ("fsdp", "every", "on"),
    "fsdp/every/keep": ("fsdp", "every", "off"),
    "fsdp/last/reshard": ("fsdp", "last", "on"),
    "fsdp/last/keep": ("fsdp", "last", "off"),
}


@dataclass(frozen=True)
class Measured:
    """One run's figures from its metrics.csv."""

    samples_per_s: float  # median over the counted steps
    tokens_per_s: float
    train_mem_mb: float  # the largest over the counted steps (each row holds the largest rank's)
    mem_peak_mb: float
    grad_kept_mb: float
    weights_mb: float
    gradients_mb: float
    optimizer_mb: float
    calls: dict[str, float]  # per full-window step (median), by collective
    bytes: dict[str, float]
    losses: tuple[float, ...]  # every step's training loss, in order
    steps: int  # steps counted (after the skipped warm-up)
    wall_s: float  # submit -> run ended (torchrun's start-up, the final evaluation and save included)


def measured_of(runner: Runner, run_id: str, skip_steps: int, accum_steps: int, wall_s: float) -> Measured:
    """The run's speed, memory, collectives and final loss from its metrics.csv."""
    rows = runner.store.read_metrics(run_id)
    tail = rows[rows["step"] > skip_steps]
    if len(tail) < 3:
        raise RuntimeError(f"run {run_id} wrote {len(rows)} steps: too few after skipping {skip_steps} "
                           "(raise --steps or lower --skip-steps)")
    full = tail[tail["micro_batches"] == accum_steps]
    full = full if len(full) else tail
    return Measured(
        float(tail["samples_per_s"].median()), float(tail["tokens_per_s"].median()),
        float(tail["train_mem_mb"].max()), float(tail["mem_peak_mb"].max()), float(tail["grad_kept_mb"].max()),
        float(tail["weights_mb"].max()), float(tail["gradients_mb"].max()), float(tail["optimizer_mb"].max()),
        {c: float(full[f"{c}_calls"].median()) for c in COLLECTIVES},
        {c: float(full[f"{c}_bytes"].median()) for c in COLLECTIVES},
        tuple(float(x) for x in rows["loss"]), len(tail), wall_s)


def run_once(runner: Runner, config: RunConfig, skip_steps: int) -> Measured:
    """Submit one run, wait for it to finish, read its figures, delete it (DCP checkpoints pile up)."""
    began = time.perf_counter()
    run_id = runner.submit(config)
    snap = runner.wait(run_id, timeout=1800)
    wall = time.perf_counter() - began
    if snap.state != RunState.FINISHED:
        raise RuntimeError(f"run {run_id} ({config.sharding}/{config.fsdp_sync}/"
                           f"{config.fsdp_reshard_after_backward}) ended {snap.state}: {snap.message}")
    result = measured_of(runner, run_id, skip_steps, config.accum_steps, wall)
    runner.delete(run_id)
    return result


def relative_gap(loss: float, reference: float) -> float:
    """|loss - reference| / |reference|: how far a loss is from ddp's."""
    return abs(loss - reference) / abs(reference)


def quartiles(values: list[float], digits: int = 3) -> str:
    """'M (Q1–Q3)'; one value alone is just 'M'."""
    median = f"{statistics.median(values):.{digits}f}"
    if len(values) < 2:
        return median
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{median} ({q1:.{digits}f}–{q3:.{digits}f})"


def collective_cell(runs: list[Measured], kind: str) -> str:
    """'calls × bytes' per step (medians over the rounds), '0' when the collective is unused."""
    calls = statistics.median(r.calls[kind] for r in runs)
    sent = statistics.median(r.bytes[kind] for r in runs)
    return "0" if calls == 0 else f"{calls:g} / {sent / 1e6:.2f} MB"


def table(runs: dict[str, list[Measured]], ratios: dict[str, list[float]]) -> str:
    """The markdown table: one row per configuration, medians over the rounds."""
    header = ("| configuration | samples/s ÷ ddp's (quartiles) | samples/s | train_mem_mb | mem_peak_mb | "
              "grad_kept_mb | reduce-scatters / step | all-gathers / step | all-reduces / step |")
    lines = [header, "|---" * (header.count("|") - 1) + "|"]
    for name, measured in runs.items():
        def med(field: str) -> float:
            return statistics.median(getattr(r, field) for r in measured)
        lines.append(f"| {name} | {quartiles(ratios[name])} | {med('samples_per_s'):.1f} | {med('train_mem_mb'):.2f} | "
                     f"{med('mem_peak_mb'):.0f} | {med('grad_kept_mb'):.2f} | "
                     + " | ".join(collective_cell(measured, kind) for kind in COLLECTIVES) + " |")
    return "\n".join(lines)


def describe(name: str, m: Measured) -> str:
    """One run's figures on one line."""
    return (f"{name:<19} {m.samples_per_s:7.1f} samples/s ({m.tokens_per_s:7.0f} tokens/s) over {m.steps} steps; "
            f"train_mem {m.train_mem_mb:.2f} MB (weights {m.weights_mb:.2f}, gradients {m.gradients_mb:.2f}, "
            f"optimizer {m.optimizer_mb:.2f}), peak RSS {m.mem_peak_mb:.0f} MB, grad_kept {m.grad_kept_mb:.2f} MB; "
            f"final loss {m.losses[-1]:.7f}; wall {m.wall_s:.1f} s")


def parse() -> argparse.Namespace:
    """The command line; --quick shrinks the run to a smoke test."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="mini", choices=list(GPT_PRESETS), help="gpt preset")
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--micro-batch-size", type=int, default=4, help="b of each of the 2 processes")
    parser.add_argument("--accum-steps", type=int, default=4, help="k (at least 2, so fsdp_sync modes differ)")
    parser.add_argument("--optimizer", default="adamw", help="adamw: its state is what FSDP shards most")
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps per run")
    parser.add_argument("--skip-steps", type=int, default=5, help="warm-up steps left out of the figures")
    parser.add_argument("--repeats", type=int, default=3, help="rounds, each running every configuration once")
    parser.add_argument("--tolerance", type=float, default=1e-5, help="largest final-loss difference from ddp")
    parser.add_argument("--quick", action="store_true", help="a smoke run: gpt tiny, 8 steps, 1 round")
    parser.add_argument("--json", default="", help="also write every run's figures to this file")
    args = parser.parse_args()
    if args.quick:
        args.preset, args.max_seq_len, args.steps, args.skip_steps, args.repeats = "tiny", 64, 8, 2, 1
    if args.accum_steps < 2:
        parser.error(f"--accum-steps {args.accum_steps}: at least 2 (with k=1 fsdp_sync every and last are the same)")
    return args


def main() -> None:
    """Run the configurations --repeats rounds, alternated; print every run, the check and the table."""
    args = parse()
    began = time.perf_counter()
    base = RunConfig(model="gpt", gpt_preset=args.preset, dataset="pydoc", max_seq_len=args.max_seq_len,
                     micro_batch_size=args.micro_batch_size, accum_steps=args.accum_steps, optimizer=args.optimizer,
                     lr=1e-3 if args.optimizer != "sgd" else 0.05, epochs=MANY_EPOCHS, max_steps=args.steps,
                     eval_every=EVAL_ONLY_AT_END, checkpoint_every=0, nproc=2, device="cpu")
    configs = {name: base.replace(sharding=s, fsdp_sync=sync, fsdp_reshard_after_backward=reshard)
               for name, (s, sync, reshard) in CONFIGURATIONS.items()}
    print(f"gpt {preset_words(args.preset)} on pydoc, max_seq_len={args.max_seq_len}, 2 processes (gloo, cpu), "
          f"b={base.micro_batch_size} k={base.accum_steps} (effective batch {base.effective_batch_size} sequences), "
          f"{base.optimizer} lr={base.lr:g}; {args.steps} steps per run, first {args.skip_steps} not counted; "
          f"{args.repeats} round(s); {load_average()}", flush=True)
    runs: dict[str, list[Measured]] = {name: [] for name in configs}
    ratios: dict[str, list[float]] = {name: [] for name in configs}
    first_gaps: dict[str, list[float]] = {name: [] for name in configs}  # at step 2, after one update
    loss_gaps: dict[str, list[float]] = {name: [] for name in configs}  # at the last step
    with tempfile.TemporaryDirectory(prefix="gaccum-bench-fsdp-") as runs_dir:
        runner = Runner(runs_dir, executor="thread", warm_spare=False)
        try:
            for repeat in range(args.repeats):
                order = list(configs) if repeat % 2 == 0 else list(reversed(configs))
                this_round = {}
                for name in order:
                    this_round[name] = run_once(runner, configs[name], args.skip_steps)
                    runs[name].append(this_round[name])
                    print(f"round {repeat + 1} {describe(name, this_round[name])}", flush=True)
                reference = this_round["ddp"]
                for name, m in this_round.items():
                    ratios[name].append(m.samples_per_s / reference.samples_per_s)
                    first_gaps[name].append(relative_gap(m.losses[1], reference.losses[1]))
                    loss_gaps[name].append(relative_gap(m.losses[-1], reference.losses[-1]))
        finally:
            runner.close()
    print("\ntraining loss against ddp's in the same round (same samples, same initial weights), "
          "largest |loss - ddp's| / ddp's over the rounds:")
    worst = max(max(gaps) for gaps in loss_gaps.values())
    for name in configs:
        print(f"  {name:<19} step 2: {max(first_gaps[name]):.1e}   step {args.steps}: {max(loss_gaps[name]):.1e}")
    verdict = "holds" if worst <= args.tolerance else "FAILS"
    print(f"  every configuration's final loss within {args.tolerance:g} (relative) of ddp's: {verdict} "
          f"(largest {worst:.1e})")
    print(f"\n{table(runs, ratios)}\n")
    print(f"{load_average()}; bench wall time {time.perf_counter() - began:.0f} s", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "args": vars(args), "parameters": GPT_PRESETS[args.preset].parameters,
            "runs": {name: [asdict(m) for m in measured] for name, measured in runs.items()},
            "ratios_to_ddp": ratios, "relative_loss_gaps": {"step_2": first_gaps, "last": loss_gaps}}, indent=1))
    if worst > args.tolerance:
        sys.exit(1)


if __name__ == "__main__":
    main()

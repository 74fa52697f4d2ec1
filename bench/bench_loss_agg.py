"""Throughput of the engine's loss aggregation modes (sft, pg) against a plain PyTorch loop of the same aggregation.

For --dataset sft (the bundled records, or --text-file's .jsonl) and pg (the bundled rollouts, or --pg-file's), gpt
(tiny by default), padded and packed, for each mode of --loss-agg that applies (sft: token-mean, seq-mean-token-mean,
seq-mean-token-sum, seq-mean-token-sum-norm; pg: those and group-mean-token-mean): three loops on the same model,
initial weights, windows, sample order (the engine's: pg's keeps a group's records together), padding or packing, b,
k and optimizer:

- plain: the loop a practitioner writes by hand (nanoGPT's, as bench_lm_vs_textbook.py's textbook loop), with the
  aggregation written here, in plain torch: before the window's backward passes, the window's micro-batches are built
  and each loss target is given the record whose token it predicts (from the records' spans in their rows); each
  record's loss tokens n_s and the window's S records that have any are counted, and each micro-batch's per-token
  loss is weighted by 1/(S·n_s), 1/S, or 1/(S·C) (C: the longest completion of the training split after
  truncation), or, by group, 1/(G·n_g) (n_g: the loss tokens of the group's records in the window, G: the groups
  with any); token-mean, as nanoGPT writes it, divides each micro-batch's summed loss by the window's Σn_s. pg's
  per-token loss is -A·log p, A the record's advantage: each weight is multiplied by A (token-mean's too: A/Σn_s).
  Then backward, clip, step, zero_grad. gaccum's token weights are not used.
- exact: Engine.run with reduction mean (the window's per-token weights, exact under accumulation), every metric
  written to the run's CSV files (bench_lm_vs_textbook.engine_run).
- textbook: Engine.run with reduction mean_per_micro_batch (each micro-batch aggregated alone, over k): what the
  exact weighting costs over it.

Each loop evaluates after each epoch and continues a prompt greedily, as the engine does. The three alternate which
goes first, in several fresh processes with one torch thread on one pinned core (bench/common.py); each repeat checks
that plain and exact end with the same weights (max |Δθ|), and that training moved them. Printed per data set, mode
and padding: tokens/s (loss tokens) of each loop, the median ratio exact/plain (goal >= 0.97) with its quartiles, on the
CPU also the CPU-time ratio, the ratio to the last step's end (the last evaluation and sample left out), and
exact/textbook. --json ends with one JSON line of the headline figures.

    python bench/bench_loss_agg.py [--micro-batch-size 8] [--accum-steps 4] [--max-seq-len 128] [--epochs 3]
        [--steps 0] [--repeats 4] [--processes 3] [--preset tiny] [--amp off|bf16|fp16] [--dataset sft pg]
        [--loss-agg MODE ...] [--packing off on] [--text-file F.jsonl] [--pg-file F.jsonl] [--device cpu|cuda|cuda:N]
        [--json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gaccum_core.config import RunConfig  # noqa: E402
from gaccum_core.train.engine import Engine  # noqa: E402
from gaccum_core.train.evaluation import SAMPLE_PROMPT, SAMPLE_TOKENS, eval_indices  # noqa: E402
from gaccum_core.train.precision import DTYPES  # noqa: E402
from gaccum_core.train.weighting import sample_order  # noqa: E402
from bench_lm_vs_textbook import IGNORE, WEIGHT_TOLERANCE, _max_weight_difference, _validate, engine_run  # noqa: E402
from common import (add_device_flags, chosen_device, clock, headline, print_json, quartile_values,  # noqa: E402
                    plain_step, quiet_cpu, say_skipped)

MODES = {"sft": ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")}
MODES["pg"] = (*MODES["sft"], "group-mean-token-mean")
PACKINGS = ("off", "on")
LOOPS = ("plain", "exact", "textbook")
GOAL = 0.97
# What each loss token of record s weighs in a sequence mode, from the window's loss tokens per record n (n_s) and the
# number S of records with any, and C: the window's loss is then Σ_s Σ_{t∈s} weight_s · l_t. (token-mean is written
# as nanoGPT writes it: each micro-batch's summed loss over the window's loss tokens.)
SEQUENCE_WEIGHTS = {
    "token-mean": lambda n, s, c: torch.full_like(n, 1.0) / n.sum(),
    "seq-mean-token-mean": lambda n, s, c: 1 / (s * n),
    "seq-mean-token-sum": lambda n, s, c: torch.full_like(n, 1.0) / s,
    "seq-mean-token-sum-norm": lambda n, s, c: torch.full_like(n, 1.0) / (s * c),
}


def record_of_targets(train, indices: torch.Tensor, targets: torch.Tensor, first: int) -> tuple[torch.Tensor, int]:
    """(N, T): at each loss target the window-wide number (from `first` on) of the record whose token it predicts,
    -1 elsewhere; and the next number. Target j predicts token j + 1: a record spanning [start, end) in its row owns
    targets start - 1 to end - 2, those that are not IGNORE (its prompt's are)."""
    owner, number = torch.full_like(targets, -1), first
    for row, spans in enumerate(train.spans(indices)):
        for start, end, _ in spans.tolist():
            owner[row, max(start - 1, 0):end - 1] = number
            number += 1
    return owner.masked_fill_(targets == IGNORE, -1), number


def window_token_weights(mode: str, owners: list[torch.Tensor], norm_c: float, records: int,
                         advantages: torch.Tensor | None = None,
                         groups: torch.Tensor | None = None) -> tuple[list[torch.Tensor], int]:
    """Each micro-batch's per-target weights (0 where no loss) aggregating the whole window (its `records` records,
    numbered) by the mode, times each record's advantage (pg); and the window's loss tokens."""
    per_record_tokens = torch.bincount(torch.cat([o[o >= 0] for o in owners]), minlength=records).double()  # n_s
    if mode == "group-mean-token-mean":  # n_g: the loss tokens of each group's records; G: the groups with any
        per_group = torch.zeros(int(groups.max()) + 1, dtype=torch.float64).index_add_(0, groups, per_record_tokens)
        weight = 1 / ((per_group > 0).sum() * per_group[groups])
    else:
        sequences = (per_record_tokens > 0).sum()  # S: a record without loss tokens counts in no mean
        weight = SEQUENCE_WEIGHTS[mode](per_record_tokens, sequences, norm_c)
    weight = weight.float() if advantages is None else weight.float() * advantages  # A in float32, as it is stored
    return [torch.where(o >= 0, weight[o.clamp(min=0)], 0.0) for o in owners], int(per_record_tokens.sum())


def longest_completion(train) -> int:
    """The most loss tokens a record of the training split holds after truncation, counted here (C's default)."""
    indices = torch.arange(len(train))
    return max(int(torch.bincount(o[o >= 0], minlength=1).max()) for o in
               (record_of_targets(train, part, train.batch(part)[1], 0)[0] for part in indices.split(64)))


def plain_run(config: RunConfig) -> tuple[dict, torch.nn.Module]:
    """The plain loop for config.epochs epochs (at most config.max_steps steps), evaluating and sampling after each
    epoch; returns its timing (and how far training moved the weights) and the trained model."""
    engine = Engine(config)  # only for its identical initial model and data (records, padding or packing)
    model, train, device = engine.model, engine.data.train, engine.device
    initial = [p.detach().clone() for p in model.parameters()]
    optimizer = {"sgd": lambda ps: torch.optim.SGD(ps, lr=config.lr, momentum=config.momentum,
                                                   weight_decay=config.weight_decay),
                 "adamw": lambda ps: torch.optim.AdamW(ps, lr=config.lr, weight_decay=config.weight_decay)
                 }[config.optimizer](model.parameters())
    dtype = DTYPES.get(config.amp)
    ctx = nullcontext() if dtype is None else torch.amp.autocast(device_type=device.type, dtype=dtype)
    scaler = torch.amp.GradScaler(device.type, init_scale=config.init_scale, growth_interval=config.growth_interval,
                                  enabled=config.amp == "fp16")
    norm_c = float(config.loss_agg_norm or longest_completion(train))
    b, k, n = config.micro_batch_size, config.accum_steps, len(train)
    steps, tokens = 0, 0
    model.train()
    start, cpu = clock(device), time.thread_time()
    for epoch in range(config.epochs):
        order = sample_order(config, train, epoch)
        for w in range(0, n, b * k):
            tokens += _window(config, train, order[w:w + b * k].split(b), model, ctx, scaler, optimizer, norm_c)
            steps += 1
            if steps == config.max_steps:
                break
        # As the engine's last step row counts it: from the start to the last step's end (earlier evaluations in).
        train_seconds = clock(device) - start
        _evaluate(config, engine, ctx)
        if steps == config.max_steps:
            break
    moved = max((p.detach() - q).abs().max().item() for p, q in zip(model.parameters(), initial))
    return {"tokens": tokens, "wall": clock(device) - start, "cpu": time.thread_time() - cpu,
            "train_wall": train_seconds, "moved": moved}, model


def _window(config: RunConfig, train, micro_batches: tuple[torch.Tensor, ...], model: torch.nn.Module, ctx,
            scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer, norm_c: float) -> int:
    """One window: its micro-batches built and counted before any backward, then accumulated; one step. Its tokens."""
    device = next(model.parameters()).device
    batches, owners, records, first = [], [], [], 0
    for indices in micro_batches:
        x, y = train.batch(indices)
        owner, first = record_of_targets(train, indices, y, first)
        batches.append((x.to(device), y.to(device)))
        owners.append(owner)
        records.append(train.describe(indices)[0])  # the records of the samples, numbered as record_of_targets does
    if config.loss_agg == "token-mean" and config.dataset == "sft":
        tokens = sum(int((y != IGNORE).sum()) for _, y in batches)
        weights = [None] * len(batches)
    else:
        ids = np.concatenate(records)
        pg = config.dataset == "pg"
        weights, tokens = window_token_weights(config.loss_agg, owners, norm_c, first,
                                               torch.from_numpy(train.advantages[ids]).float() if pg else None,
                                               torch.from_numpy(train.groups[ids]) if pg else None)
    for (x, y), weight in zip(batches, weights):
        with ctx:
            logits = model(x)
        if weight is None:  # token-mean: the summed loss over the window's loss tokens
            loss = F.cross_entropy(logits.float().flatten(0, -2), y.flatten(), ignore_index=IGNORE,
                                   reduction="sum") / tokens
        else:
            losses = F.cross_entropy(logits.float().transpose(1, 2), y, ignore_index=IGNORE, reduction="none")
            loss = (weight.to(device) * losses).sum()
        scaler.scale(loss).backward()
    plain_step(model, optimizer, scaler, config.grad_clip)
    return tokens


def _evaluate(config: RunConfig, engine: Engine, ctx) -> None:
    """The engine's end-of-epoch work, plainly: the mean loss per target token over the validation samples it
    reads, and a greedy continuation of its prompt."""
    model, val, b = engine.model, engine.data.test, config.micro_batch_size
    _validate(model, model, val, eval_indices(len(val), b, config.eval_batches).split(b), ctx, engine.device)
    _, ids = engine.data.tokens.prompt(SAMPLE_PROMPT)
    model.eval()
    with ctx, torch.no_grad():
        model.generate(torch.tensor(ids, device=engine.device), SAMPLE_TOKENS)
    model.train()


def _repeats(configs: dict[str, RunConfig], repeats: int, warm_up: bool, runs_dir: Path) -> list[dict]:
    """The three loops `repeats` times, each repeat's order rotated (after a warm-up round unless warm_up is False)."""
    run = {"plain": lambda: plain_run(configs["plain"]),
           "exact": lambda: engine_run(configs["exact"], runs_dir),
           "textbook": lambda: engine_run(configs["textbook"], runs_dir)}
    if warm_up:
        for loop in LOOPS:
            run[loop]()
    out = []
    for repeat in range(repeats):
        order = LOOPS[repeat % 3:] + LOOPS[:repeat % 3]
        done = {loop: run[loop]() for loop in order}
        figures = {loop: timing for loop, (timing, _) in done.items()}
        if len({figures[loop]["tokens"] for loop in LOOPS}) != 1:
            raise AssertionError(f"the loops trained on different tokens: {[figures[lp]['tokens'] for lp in LOOPS]}")
        out.append({**figures, "first": order[0], "load": os.getloadavg()[0],
                    "weight_diff": _max_weight_difference(done["plain"][1], done["exact"][1])})
    return out


def _configs(args: argparse.Namespace, device: torch.device, dataset: str, mode: str,
             packing: str) -> dict[str, RunConfig]:
    """Each loop's run: plain and exact with reduction mean, textbook with mean_per_micro_batch."""
    def config(reduction: str) -> RunConfig:
        return RunConfig(model="gpt", dataset=dataset, text_file={"sft": args.text_file, "pg": args.pg_file}[dataset],
                         gpt_preset=args.preset,
                         max_seq_len=args.max_seq_len, packing=packing, loss_agg=mode,
                         micro_batch_size=args.micro_batch_size, accum_steps=args.accum_steps, reduction=reduction,
                         optimizer=args.optimizer, lr=args.lr, grad_clip=args.grad_clip, amp=args.amp,
                         epochs=args.epochs, max_steps=args.steps, eval_batches=args.eval_batches, device=str(device))
    return {"plain": config("mean"), "exact": config("mean"), "textbook": config("mean_per_micro_batch")}


def _cases(args: argparse.Namespace, device: torch.device) -> list[dict]:
    """Every (dataset, mode, packing) case's repeats, in this process (a mode only on the data sets it applies to)."""
    quiet_cpu(device, args.threads)
    cases = []
    with tempfile.TemporaryDirectory() as runs_dir:
        for dataset, mode, packing in _case_keys(args):
            repeats = _repeats(_configs(args, device, dataset, mode, packing), args.repeats, not args.quick,
                               Path(runs_dir))
            cases.append({"dataset": dataset, "mode": mode, "packing": packing, "repeats": repeats})
    return cases


def _case_keys(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """(dataset, mode, packing) of each case measured."""
    return [(dataset, mode, packing) for dataset in args.dataset for mode in args.loss_agg if mode in MODES[dataset]
            for packing in args.packing]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", help="gpt preset")
    parser.add_argument("--dataset", nargs="+", default=list(MODES), choices=MODES, help="the records tasks measured")
    parser.add_argument("--text-file", default="", help="sft records from this .jsonl file instead of the bundled ones")
    parser.add_argument("--pg-file", default="", help="pg rollouts from this .jsonl file instead of the bundled ones")
    parser.add_argument("--loss-agg", nargs="+", default=list(MODES["pg"]), choices=MODES["pg"],
                        help="the modes measured (each on the data sets it applies to)")
    parser.add_argument("--packing", nargs="+", default=list(PACKINGS), choices=PACKINGS, help="padded, packed")
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--accum-steps", type=int, default=4)
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3, help="epochs per repeat (the bundled records at b=8, k=4: "
                        "sft 7 steps padded, 5 packed an epoch; pg 7 and 6), each ended by an evaluation and a sample")
    parser.add_argument("--steps", type=int, default=0, help="at most this many optimizer steps per repeat (0: no cap)")
    parser.add_argument("--eval-batches", type=int, default=50, help="validation batches per evaluation")
    parser.add_argument("--optimizer", default="adamw", choices=("sgd", "adamw"))
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--grad-clip", type=float, default=1.0)
    parser.add_argument("--amp", default="off", choices=("off", "bf16", "fp16"),
                        help="autocast on --device (fp16 also scales the loss with a GradScaler)")
    parser.add_argument("--repeats", type=int, default=4, help="rounds of the three loops per process per case")
    parser.add_argument("--processes", type=int, default=3, help="fresh processes (memory layout differs per process)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads; 1 keeps a shared 2-core box quiet")
    parser.add_argument("--quick", action="store_true", help="a smoke run: in this process, 1 round of 1 "
                        "step, max_seq_len 32, 1 validation batch, no warm-up round")
    add_device_flags(parser)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def main() -> None:
    """Run the cases in fresh processes; print each repeat, the table of medians and (--json) the JSON line."""
    args = _parser().parse_args()
    if not _case_keys(args):
        print(f"bench_loss_agg.py: --loss-agg {' '.join(args.loss_agg)} applies to none of --dataset "
              f"{' '.join(args.dataset)} (group-mean-token-mean: pg only)", file=sys.stderr)
        raise SystemExit(2)
    if args.quick:
        args.processes, args.repeats, args.steps, args.max_seq_len, args.eval_batches = 1, 1, 1, 32, 1
    device = chosen_device(args.device)
    if args.worker:
        print(json.dumps(_cases(args, device)))
        return
    print(f"model=gpt {args.preset} dataset={','.join(args.dataset)} max_seq_len={args.max_seq_len} b={args.micro_batch_size} "
          f"k={args.accum_steps} epochs/repeat={args.epochs} max_steps={args.steps or 'none'} "
          f"optimizer={args.optimizer} grad_clip={args.grad_clip} amp={args.amp} threads={args.threads} "
          f"processes={args.processes} repeats/process={args.repeats} torch={torch.__version__} device={device}")
    say_skipped(device, "pinning to one core, --threads and the CPU-time ratio")
    print("load average (1, 5, 15 min) before: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    cases = _run_workers(args, device)
    print("load average (1, 5, 15 min) after:  %.2f %.2f %.2f" % os.getloadavg())
    rows = [_summary(case, repeats, device.type == "cpu") for case, repeats in cases.items()]
    _print_table(rows, device.type == "cpu")
    same = max(row["max_weight_diff"] for row in rows) <= WEIGHT_TOLERANCE
    print(f"same weights, plain and exact, after every repeat: {'yes' if same else 'NO'} (largest |Δθ| "
          f"{max(row['max_weight_diff'] for row in rows):.1e}, tolerance {WEIGHT_TOLERANCE:g}; training moved the "
          f"weights by at least {min(row['moved'] for row in rows):.1e})")
    if args.json:
        print_json(headline("loss_agg", device, model="gpt", dataset=args.dataset, amp=args.amp, b=args.micro_batch_size,
                            k=args.accum_steps, max_seq_len=args.max_seq_len, repeats=len(next(iter(cases.values()))),
                            cases=rows, worst_ratio_median=min(row["ratio_median"] for row in rows),
                            same_weights=same, max_weight_diff=max(row["max_weight_diff"] for row in rows)))
    if not same:
        sys.exit(1)


def _run_workers(args: argparse.Namespace, device: torch.device) -> dict[tuple[str, str, str], list[dict]]:
    """Each (dataset, mode, packing) case's repeats over the worker processes (--quick: in this one), each repeat
    printed."""
    cases: dict[tuple[str, str, str], list[dict]] = {}
    for process in range(args.processes):
        found = _cases(args, device) if args.quick else json.loads(subprocess.run(
            [sys.executable, __file__, "--worker", *sys.argv[1:]], capture_output=True, text=True,
            check=True).stdout.strip().splitlines()[-1])
        for case in found:
            for repeat in case["repeats"]:
                cases.setdefault((case["dataset"], case["mode"], case["packing"]), []).append(repeat)
                rate = {loop: repeat[loop]["tokens"] / repeat[loop]["wall"] for loop in LOOPS}
                print(f"process {process + 1} {case['dataset']:3} {case['mode']:23} packing {case['packing']:3} ({repeat['first']:8} "
                      f"first): tokens/s plain {rate['plain']:6.0f} exact {rate['exact']:6.0f} textbook "
                      f"{rate['textbook']:6.0f}   exact/plain {rate['exact'] / rate['plain']:.3f}   max |Δθ| "
                      f"{repeat['weight_diff']:.1e}   load {repeat['load']:.2f}")
    return cases


def _summary(case: tuple[str, str, str], repeats: list[dict], on_cpu: bool) -> dict:
    """One case's medians: tokens/s of each loop, exact/plain (wall, CPU time, training only), exact/textbook."""
    rates = {loop: [r[loop]["tokens"] / r[loop]["wall"] for r in repeats] for loop in LOOPS}
    ratio = [r["plain"]["wall"] / r["exact"]["wall"] for r in repeats]
    cost = [r["textbook"]["wall"] / r["exact"]["wall"] for r in repeats]
    row = {"dataset": case[0], "mode": case[1], "packing": case[2],
           **{f"{loop}_tokens_per_s": statistics.median(rates[loop]) for loop in LOOPS},
           "ratio_median": statistics.median(ratio), "ratio_quartiles": quartile_values(ratio),
           "to_last_step_ratio_median": statistics.median(r["plain"]["train_wall"] / r["exact"]["train_wall"]
                                                           for r in repeats),
           "exact_over_textbook_median": statistics.median(cost),
           "exact_over_textbook_quartiles": quartile_values(cost),
           "max_weight_diff": max(r["weight_diff"] for r in repeats),
           "moved": min(r["plain"]["moved"] for r in repeats)}
    if on_cpu:
        row["cpu_time_ratio_median"] = statistics.median(r["plain"]["cpu"] / r["exact"]["cpu"] for r in repeats)
    return row


def _print_table(rows: list[dict], on_cpu: bool) -> None:
    """The medians as a Markdown table (what docs/benchmarks.md carries)."""
    print(f"\n| dataset | mode | packing | tokens/s plain | tokens/s exact | exact/plain, median (quartiles); goal >= {GOAL} |"
          + (" CPU time |" if on_cpu else "") + " to the last step | exact/textbook (quartiles) | max abs Δθ |")
    print("|---|---|---|---|---|---|" + ("---|" if on_cpu else "") + "---|---|---|")
    for row in rows:
        cpu = f" {row['cpu_time_ratio_median']:.3f} |" if on_cpu else ""
        print(f"| {row['dataset']} | {row['mode']} | {row['packing']} | {row['plain_tokens_per_s']:.0f} | {row['exact_tokens_per_s']:.0f} "
              f"| {row['ratio_median']:.3f} ({_quartiles(row['ratio_quartiles'])}) |{cpu} "
              f"{row['to_last_step_ratio_median']:.3f} | {row['exact_over_textbook_median']:.3f} "
              f"({_quartiles(row['exact_over_textbook_quartiles'])}) | {row['max_weight_diff']:.1e} |")
    print()


def _quartiles(values: list[float] | None) -> str:
    """quartile_values' [Q1, Q3] as 'Q1-Q3', or 'n/a'."""
    return "n/a" if values is None else f"{values[0]:.3f}-{values[1]:.3f}"


if __name__ == "__main__":
    main()

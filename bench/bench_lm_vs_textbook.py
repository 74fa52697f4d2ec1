"""Throughput of the engine on a language model (every metric recorded to CSV) against a textbook nanoGPT-style loop.

With --model hf:DIR (or hf:tiny, a tiny Llama-style model and tokenizer built in a temporary directory
as the tests build theirs) the textbook loop is a plain Transformers-style loop instead: the Hugging Face
model called with input_ids and attention_mask, the loss from its logits, backward, step.

The language-model counterpart of bench_engine_vs_textbook.py: gpt (tiny by default) on the bundled
pydoc text, on the CPU. The textbook loop is plain PyTorch written the way nanoGPT writes it: for each
window of k micro-batches, count the window's target tokens, then for each micro-batch a forward under
the autocast context, the token cross-entropy summed over the micro-batch (padding ignored) and divided
by the window's target tokens (the exact weighting the engine's reduction=mean uses, so both compute
the same update), backward; then clip, step, zero_grad. After the last step it evaluates on the
validation samples the engine reads (its eval_batches batches' worth) and continues a prompt greedily, as
the engine does at the end of a run. Both see the
same model, initial weights, windows, sample order, padding, b, k and optimizer; the engine runs
through Engine.run with the run store's CSV writer as its sink (what a run does, less the checkpoint).

The figure is the median over the repeats of tokens/s (engine) / tokens/s (textbook), the two
alternating which goes first, in several fresh processes with one torch thread on one pinned core.
Each repeat also checks that both ended with the same weights (so the comparison is of the same work).
On a shared machine other processes preempt the pinned thread: a run whose wall time exceeds its CPU
time by more than 3% was disturbed (its involuntary context switches are printed), so the CPU-time
ratio and the median over undisturbed repeats are printed beside the plain wall-clock one.

With --device cuda both run on the GPU (autocast follows the device; fp16 scales the loss with a GradScaler
in both loops, as nanoGPT does), every clock read after torch.cuda.synchronize(); pinning, --threads, the
CPU-time ratio and the disturbance checks are CPU-only and skipped. --json ends the output with one JSON
line of the figures.

    python bench/bench_lm_vs_textbook.py [--micro-batch-size 8] [--accum-steps 4] [--max-seq-len 128]
        [--steps 40] [--repeats 4] [--processes 3] [--preset tiny] [--amp off|bf16|fp16]
        [--model gpt|hf:DIR|hf:tiny] [--device cpu|cuda|cuda:N] [--json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gaccum_core.train.accumulation import epoch_order  # noqa: E402
from gaccum_core.config import RunConfig, is_hf  # noqa: E402
from gaccum_core.hfdir import MASKED  # noqa: E402
from gaccum_core.train.engine import Engine  # noqa: E402
from gaccum_core.train.evaluation import SAMPLE_PROMPT, SAMPLE_TOKENS, eval_indices  # noqa: E402
from gaccum_core.runs.store import RunStore  # noqa: E402
from gaccum_core.train.precision import DTYPES  # noqa: E402
from common import (add_device_flags, chosen_device, clock, headline, print_json, quartile_values,  # noqa: E402
                    plain_step, quartiles, quiet_cpu, say_skipped)

IGNORE = -100  # cross_entropy's ignore_index: the targets of padding
WEIGHT_TOLERANCE = 1e-5
UNDISTURBED = 0.97  # CPU time / wall time of a run no other process preempted for long
_RUSAGE = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


def _preemptions() -> int:
    """Involuntary context switches of this thread so far: other processes taking its core."""
    return resource.getrusage(_RUSAGE).ru_nivcsw


def textbook_run(config: RunConfig) -> tuple[dict, torch.nn.Module]:
    """The nanoGPT-style loop for config.max_steps optimizer steps (whole epochs when 0), then one
    validation pass and a greedy sample; returns its timing and the trained model."""
    engine = Engine(config)  # only for its identical initial model and data (sequences, padding)
    model, train, val, device = engine.model, engine.data.train, engine.data.test, engine.device
    forward = _transformers_forward(model.model) if is_hf(config.model) else model
    if config.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                                    weight_decay=config.weight_decay)
    else:
        optimizer = (torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam)(
            model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    dtype = DTYPES.get(config.amp)
    ctx = nullcontext() if dtype is None else torch.amp.autocast(device_type=device.type, dtype=dtype)
    scaler = torch.amp.GradScaler(device.type, init_scale=config.init_scale, growth_interval=config.growth_interval,
                                  enabled=config.amp == "fp16")
    b, k, n = config.micro_batch_size, config.accum_steps, len(train)
    lengths = train.targets  # target tokens of each sequence: its length - 1
    steps, tokens = 0, 0
    model.train()
    start, cpu, preempted = clock(device), time.thread_time(), _preemptions()
    for epoch in range(config.epochs):
        order = epoch_order(n, config.seed, epoch)
        for w in range(0, n, b * k):
            window = order[w:w + b * k]
            window_tokens = int(lengths[window].sum())  # counted before the window's backward passes
            for m in range(0, len(window), b):
                x, y = train.batch(window[m:m + b])
                x, y = x.to(device), y.to(device)
                with ctx:
                    logits = forward(x)
                loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1),
                                       ignore_index=IGNORE, reduction="sum") / window_tokens
                scaler.scale(loss).backward()
            plain_step(model, optimizer, scaler, config.grad_clip)
            tokens += window_tokens
            steps += 1
            if steps == config.max_steps:
                break
        if steps == config.max_steps:
            break
    train_seconds = clock(device) - start
    _validate(model, forward, val, eval_indices(len(val), b, config.eval_batches).split(b), ctx, device)
    _, ids = engine.data.tokens.prompt(SAMPLE_PROMPT)
    model.eval()
    with ctx:
        if is_hf(config.model):  # Transformers' own greedy generate, with its cache
            prompt = torch.tensor([ids], device=device)
            model.model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=SAMPLE_TOKENS,
                                 do_sample=False, pad_token_id=model.model.config.eos_token_id)
        else:
            model.generate(torch.tensor(ids, device=device), SAMPLE_TOKENS)
    model.train()
    return {"tokens": tokens, "wall": clock(device) - start, "cpu": time.thread_time() - cpu,
            "train_wall": train_seconds, "preempted": _preemptions() - preempted}, model


def _transformers_forward(model: torch.nn.Module):
    """A Transformers user's forward: padded input_ids with their attention_mask, the output's logits. Without
    the key/value cache, as the engine runs it: building one in training is work the engine does not do, and
    this loop is the yardstick (with it, measured, the plain loop is ~1.3x slower)."""
    def forward(x: torch.Tensor) -> torch.Tensor:
        real = x != MASKED
        return model(input_ids=torch.where(real, x, 0), attention_mask=real.long(), use_cache=False).logits
    return forward


@torch.no_grad()
def _validate(model: torch.nn.Module, forward, val, batches: tuple[torch.Tensor, ...], ctx,
              device: torch.device) -> float:
    """nanoGPT's estimate_loss over the validation samples the engine reads (eval_indices: eval_batches
    batches' worth, or the whole split), in the same batches: mean loss per target token."""
    model.eval()
    loss, count = 0.0, 0
    for batch in batches:
        x, y = val.batch(batch)
        x, y = x.to(device), y.to(device)
        with ctx:
            logits = forward(x)
        loss += F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1),
                                ignore_index=IGNORE, reduction="sum").item()
        count += int((y != IGNORE).sum())
    model.train()
    return loss / max(count, 1)


def engine_run(config: RunConfig, runs_dir: Path) -> tuple[dict, torch.nn.Module]:
    """Engine.run with every metric written to a run's CSV files (and the sample to samples.jsonl)."""
    store = RunStore(runs_dir)
    run_id = store.create(config)
    engine = Engine(config)
    writer = store.writer(run_id)
    start, cpu, preempted = clock(engine.device), time.thread_time(), _preemptions()
    engine.run(writer)
    seconds, cpu_seconds = clock(engine.device) - start, time.thread_time() - cpu
    preempted = _preemptions() - preempted
    writer.close()
    rows = store.read_metrics(run_id)
    # The last step row's wall_time_s counts from Engine.run's start to that step's end: training only.
    return {"tokens": int(rows["tokens"].sum()), "wall": seconds, "cpu": cpu_seconds,
            "train_wall": float(rows["wall_time_s"].iloc[-1]), "preempted": preempted}, engine.model


def _max_weight_difference(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters(), strict=True))


def _pairs(config: RunConfig, repeats: int, warm_up: bool = True) -> list[dict]:
    """Alternate both loops `repeats` times in this process (after a warm-up pair unless warm_up is False)."""
    out = []
    seed_model = Engine(config).model  # training must move the weights: the weight check must not pass untrained
    with tempfile.TemporaryDirectory() as runs_dir:
        if warm_up:
            textbook_run(config), engine_run(config, Path(runs_dir))  # lazy init, first touch
        for repeat in range(repeats):
            if repeat % 2:
                (e, e_model), (t, t_model) = engine_run(config, Path(runs_dir)), textbook_run(config)
            else:
                (t, t_model), (e, e_model) = textbook_run(config), engine_run(config, Path(runs_dir))
            if e["tokens"] != t["tokens"]:
                raise AssertionError(f"engine trained on {e['tokens']} tokens, textbook on {t['tokens']}")
            out.append({"textbook": t, "engine": e, "engine_first": bool(repeat % 2),
                        "weight_diff": _max_weight_difference(e_model, t_model),
                        "moved": _max_weight_difference(e_model, seed_model),
                        "load": os.getloadavg()[0]})
    return out


def main() -> None:
    """Alternate both loops in several fresh processes; print tokens/s and the engine/textbook ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", help="gpt preset")
    parser.add_argument("--model", default="gpt", help="gpt, hf:DIR, or hf:tiny (a tiny Llama built here)")
    parser.add_argument("--text-file", default="", help="train on this text or .jsonl file instead of pydoc")
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--accum-steps", type=int, default=4)
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps per repeat (0 = one whole epoch)")
    parser.add_argument("--optimizer", default="adamw", choices=("sgd", "adam", "adamw"))
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--grad-clip", type=float, default=1.0)
    parser.add_argument("--amp", default="off", choices=("off", "bf16", "fp16"),
                        help="autocast on --device (fp16 also scales the loss with a GradScaler)")
    parser.add_argument("--repeats", type=int, default=4, help="alternations per process")
    parser.add_argument("--processes", type=int, default=3,
                        help="fresh processes: memory layout differs per process and shifts kernel speed")
    parser.add_argument("--threads", type=int, default=1, help="torch threads; 1 keeps a shared 2-core box quiet")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 1 process, 2 repeats of 2 steps, max_seq_len 32, no warm-up pair")
    add_device_flags(parser)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.processes, args.repeats, args.steps, args.max_seq_len = 1, 2, 2, 32
    device = chosen_device(args.device)
    if args.model == "hf:tiny":  # built once by the parent; its workers get the directory
        args.model = _tiny_hf_model()
        sys.argv = [a if a != "hf:tiny" else args.model for a in sys.argv]
    config = RunConfig(model=args.model, dataset="text" if args.text_file else "pydoc", text_file=args.text_file,
                       gpt_preset=args.preset, max_seq_len=args.max_seq_len,
                       micro_batch_size=args.micro_batch_size, accum_steps=args.accum_steps, reduction="mean",
                       optimizer=args.optimizer, lr=args.lr, grad_clip=args.grad_clip, amp=args.amp,
                       max_steps=args.steps, device=str(device))
    if args.worker:
        quiet_cpu(device, args.threads)
        print(json.dumps(_pairs(config, args.repeats, warm_up=not args.quick)))
        return
    described = f"gpt {config.gpt_preset}" if config.model == "gpt" else f"{config.model} (textbook: a Transformers-style loop)"
    print(f"model={described} dataset={config.dataset} max_seq_len={config.max_seq_len} b={config.micro_batch_size} "
          f"k={config.accum_steps} steps/repeat={config.max_steps or 'one epoch'} optimizer={config.optimizer} "
          f"grad_clip={config.grad_clip} amp={config.amp} threads={args.threads} processes={args.processes} "
          f"repeats/process={args.repeats} torch={torch.__version__} device={device}")
    _report(config, device, args)


def _report(config: RunConfig, device: torch.device, args: argparse.Namespace) -> None:
    """Print each repeat, the medians, the weight check and (--json) the JSON line."""
    on_cpu = device.type == "cpu"
    say_skipped(device, "pinning to one core, --threads, the CPU-time ratio and the disturbance checks "
                        "(preemptions, CPU/wall)")
    print("load average (1, 5, 15 min) before: %.2f %.2f %.2f" % os.getloadavg())
    ratios, rates, weight_diffs, moved = _repeats(args.processes, on_cpu)
    print("load average (1, 5, 15 min) after:  %.2f %.2f %.2f" % os.getloadavg())
    print(f"tokens/s, median (quartiles): textbook {statistics.median(rates['textbook']):.0f} "
          f"({quartiles(rates['textbook'], '.0f')})   engine {statistics.median(rates['engine']):.0f} "
          f"({quartiles(rates['engine'], '.0f')})")
    print(f"median ratio engine/textbook, wall clock, over {len(ratios['wall'])} repeats: "
          f"{statistics.median(ratios['wall']):.3f} (quartiles {quartiles(ratios['wall'])}; target >= 0.97)")
    if on_cpu:
        print(f"median ratio engine/textbook, CPU time:                  {statistics.median(ratios['cpu']):.3f} "
              f"(quartiles {quartiles(ratios['cpu'])})")
    print(f"median ratio engine/textbook, training only (wall):      {statistics.median(ratios['train']):.3f} "
          f"(quartiles {quartiles(ratios['train'])})")
    quiet = ratios["undisturbed"]
    if on_cpu:
        print(f"median ratio engine/textbook, wall clock, undisturbed repeats only ({len(quiet)} of "
              f"{len(ratios['wall'])}, both runs' CPU/wall >= {UNDISTURBED}): "
              + (f"{statistics.median(quiet):.3f} (quartiles {quartiles(quiet)})" if quiet else "none"))
    same = max(weight_diffs) <= WEIGHT_TOLERANCE
    print(f"same weights after the measured steps: {'yes' if same else 'NO'} (largest |engine - textbook| "
          f"{max(weight_diffs):.1e}, tolerance {WEIGHT_TOLERANCE:g}; training moved the weights by up to "
          f"{min(moved):.1e})")
    if args.json:
        print_json(headline("lm_vs_textbook", device, model=config.model, amp=config.amp, b=config.micro_batch_size,
                            k=config.accum_steps, max_seq_len=config.max_seq_len, repeats=len(ratios["wall"]),
                            ratio_median=statistics.median(ratios["wall"]),
                            ratio_quartiles=quartile_values(ratios["wall"]),
                            training_only_ratio_median=statistics.median(ratios["train"]),
                            engine_tokens_per_s=statistics.median(rates["engine"]),
                            textbook_tokens_per_s=statistics.median(rates["textbook"]),
                            same_weights=same, max_weight_diff=max(weight_diffs)))
    if not same:
        sys.exit(1)


def _repeats(processes: int, on_cpu: bool) -> tuple[dict[str, list[float]], dict[str, list[float]], list, list]:
    """Run the worker processes and print each repeat; (ratios, tokens/s, weight differences, weights moved)."""
    ratios: dict[str, list[float]] = {"wall": [], "cpu": [], "train": [], "undisturbed": []}
    rates: dict[str, list[float]] = {"textbook": [], "engine": []}
    weight_diffs, moved = [], []
    for process in range(processes):
        done = subprocess.run([sys.executable, __file__, "--worker", *sys.argv[1:]],
                              capture_output=True, text=True, check=True)
        for pair in json.loads(done.stdout.strip().splitlines()[-1]):
            t, e = pair["textbook"], pair["engine"]
            t_rate, e_rate = t["tokens"] / t["wall"], e["tokens"] / e["wall"]
            rates["textbook"].append(t_rate)
            rates["engine"].append(e_rate)
            ratios["wall"].append(e_rate / t_rate)
            ratios["cpu"].append(t["cpu"] / e["cpu"])
            ratios["train"].append(t["train_wall"] / e["train_wall"])
            quiet = min(t["cpu"] / t["wall"], e["cpu"] / e["wall"]) >= UNDISTURBED
            if quiet:
                ratios["undisturbed"].append(ratios["wall"][-1])
            weight_diffs.append(pair["weight_diff"])
            moved.append(pair["moved"])
            first = "engine" if pair["engine_first"] else "textbook"
            cpu_time = f"CPU time {ratios['cpu'][-1]:.3f}, " if on_cpu else ""
            disturbance = (f"   preempted {t['preempted']}/{e['preempted']} times, CPU/wall {t['cpu'] / t['wall']:.2f}/"
                           f"{e['cpu'] / e['wall']:.2f}{'' if quiet else '  (disturbed)'}") if on_cpu else ""
            print(f"process {process + 1} repeat ({first:8} first): textbook {t_rate:7.0f} tokens/s   "
                  f"engine {e_rate:7.0f} tokens/s   ratio {ratios['wall'][-1]:.3f}   ({cpu_time}"
                  f"training only {ratios['train'][-1]:.3f})   max |weight diff| {pair['weight_diff']:.1e}   "
                  f"load {pair['load']:.2f}{disturbance}")
    return ratios, rates, weight_diffs, moved


def _tiny_hf_model() -> str:
    """hf:DIR of a tiny Llama-style model (weights and a BPE tokenizer trained on pydoc), in a temporary directory."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from hfmodels import save_model

    return "hf:" + str(save_model(Path(tempfile.mkdtemp(prefix="gaccum-bench-hf-")) / "tiny-llama"))


if __name__ == "__main__":
    main()

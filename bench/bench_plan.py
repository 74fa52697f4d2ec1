"""The default CPU plan, measured: the plan the Plan page opens with (gaccum_core.plan.planner.default_request:
cnn on 32×32 fake images, E=256, a 32 MB budget, fp32 against bf16, cache clearing off against per
optimizer step), run through make_plan exactly as the page and `python -m gaccum_core plan` run it,
each repeat in a fresh process (its imports and data loading included in the process time).

Prints each repeat's wall time (the plan's, and the whole process's), its measurements against every
divisor of E for every combination (the work the memory line saves), its recommendation and speed; then
the median wall time against the target and whether every repeat recommended the same setting.

    python bench/bench_plan.py [--repeats 5] [--budget-mb 32] [--effective-batch 256] [--threads 1] [--table]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

TARGET_S = 15.0  # issue 21: the default CPU plan's median wall time


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="plans, each in a fresh process (default 5)")
    parser.add_argument("--budget-mb", type=float, default=None, help="memory budget (default: the page's, 32)")
    parser.add_argument("--effective-batch", type=int, default=None, help="E (default: the page's, 256)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--table", action="store_true", help="print each repeat's table and reason")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: one plan, one JSON line
    return parser.parse_args()


def _one_plan(args: argparse.Namespace) -> None:
    """In a fresh process: run the plan and print its figures as one JSON line (the table before it)."""
    start = time.perf_counter()
    import torch

    from gaccum_core.cli.plan import summary
    from gaccum_core.plan.planner import PlanRequest, default_request, make_plan
    from gaccum_core.plan.search import sizes_within
    from gaccum_core.views.plan import format_table

    torch.set_num_threads(args.threads)
    request = default_request() if args.budget_mb is None else default_request(args.budget_mb)
    if args.effective_batch is not None:
        request = PlanRequest(request.base, args.effective_batch, request.budget_mb, request.amp,
                              request.clear_cache, request.compile)
    imported = time.perf_counter() - start
    plan = make_plan(request)
    choice = plan.recommended
    if args.table:
        print(format_table(plan))
        print(summary(plan))
    print(json.dumps({
        "plan_s": plan.seconds, "process_s": time.perf_counter() - start, "imports_s": imported,
        "measurements": len(plan.candidates), "timed": sum(c.timed_steps is not None for c in plan.candidates),
        "timed_steps": sum(c.timed_steps or 0 for c in plan.candidates),
        "divisors": len(request.options) * len(sizes_within(request.effective_batch)),
        "recommended": f"{choice.options.label()} b={choice.micro_batch_size}" if choice else "none",
        "speed": choice.speed_words() if choice else None, "threads": torch.get_num_threads()}))


def _repeat(args: argparse.Namespace) -> dict:
    """One plan in a fresh process; its JSON line."""
    command = [sys.executable, os.path.abspath(__file__), "--one", "--threads", str(args.threads)]
    for flag, value in (("--budget-mb", args.budget_mb), ("--effective-batch", args.effective_batch)):
        if value is not None:
            command += [flag, str(value)]
    command += ["--table"] if args.table else []
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        sys.exit(f"the plan failed:\n{done.stderr[-3000:]}")
    lines = done.stdout.strip().splitlines()
    if args.table:
        print("\n".join(lines[:-1]))
    return json.loads(lines[-1])


def main() -> None:
    """Run the default CPU plan --repeats times in fresh processes and print what was measured."""
    args = _arguments()
    if args.one:
        _one_plan(args)
        return
    print(f"{os.cpu_count()} CPUs, {args.threads} torch thread(s), load average {os.getloadavg()[0]:.2f}")
    results = []
    for repeat in range(args.repeats):
        result = _repeat(args)
        results.append(result)
        print(f"repeat {repeat + 1}: plan {result['plan_s']:.1f} s (process {result['process_s']:.1f} s, imports "
              f"{result['imports_s']:.1f} s); {result['measurements']} candidates of {result['divisors']} "
              f"(combinations × divisors of E), {result['timed']} timed over {result['timed_steps']} steps; "
              f"recommended {result['recommended']} at {result['speed']}", flush=True)
    plan_s = statistics.median(r["plan_s"] for r in results)
    process_s = statistics.median(r["process_s"] for r in results)
    picks = [r["recommended"] for r in results]
    print(f"median wall time: plan {plan_s:.1f} s (target <= {TARGET_S:.0f} s: "
          f"{'met' if plan_s <= TARGET_S else 'MISSED'}), whole process {process_s:.1f} s, over {len(results)} "
          f"repeat(s)")
    print(f"measurements per plan: median {statistics.median(r['measurements'] for r in results):.0f} of "
          f"{results[0]['divisors']} combinations × divisors "
          f"({statistics.median(r['measurements'] for r in results) / results[0]['divisors']:.2f} of the work)")
    print(f"recommendations: {', '.join(picks)} -> {'the same in every repeat' if len(set(picks)) == 1 else 'DIFFER'}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

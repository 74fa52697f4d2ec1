"""The default CPU plan, measured: the plan the Plan page opens with (gaccum_core.plan.planner.default_request:
cnn on 32×32 fake images, E=256, a 32 MB budget, fp32 against bf16, cache clearing off against per
optimizer step), run through make_plan exactly as the page and `python -m gaccum_core plan` run it.

Prints each candidate as it is measured, then the table, the recommendation and its reason, the
total time, the candidates per option combination against the search's bound and against E's
divisors, and the time spent per candidate (median, quartiles). Repeats (--repeats) show how stable
the recommendation is on a noisy machine.

    python bench/bench_plan.py [--repeats 1] [--budget-mb 32] [--effective-batch 256] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

from gaccum_core.plan.planner import PlanRequest, default_request, make_plan  # noqa: E402
from gaccum_core.cli.plan import summary  # noqa: E402
from gaccum_core.plan.search import divisors, most_measurements  # noqa: E402
from gaccum_core.views.plan import format_table  # noqa: E402


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="whole plans to run (default 1)")
    parser.add_argument("--budget-mb", type=float, default=None, help="memory budget (default: the page's, 32)")
    parser.add_argument("--effective-batch", type=int, default=None, help="E (default: the page's, 256)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    return parser.parse_args()


def _one_plan(request: PlanRequest) -> tuple[float, list[float], object]:
    """Run the plan, printing each candidate; (total seconds, seconds per candidate, plan)."""
    marks = [0.0]

    def progress(done: int, at_most: int, candidate, seconds: float) -> None:
        marks.append(seconds)
        peak = "-" if candidate.peak_mb is None else f"{candidate.peak_mb:.1f} MB"
        speed = "-" if candidate.samples_per_s is None else f"{candidate.samples_per_s:.0f} samples/s"
        print(f"  [{done:>2}/{at_most}] {candidate.options.label():<24} b={candidate.micro_batch_size:<4} "
              f"{candidate.status:<13} {peak:>10} {speed:>16}  t={seconds:.1f} s", flush=True)

    start = time.perf_counter()
    plan = make_plan(request, progress)
    total = time.perf_counter() - start
    return total, [b - a for a, b in zip(marks, marks[1:])], plan


def main() -> None:
    """Run the default CPU plan --repeats times and print what was measured."""
    args = _arguments()
    torch.set_num_threads(args.threads)
    request = default_request() if args.budget_mb is None else default_request(args.budget_mb)
    if args.effective_batch is not None:
        request = PlanRequest(request.base, args.effective_batch, request.budget_mb, request.amp,
                              request.clear_cache, request.compile)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), load average {os.getloadavg()[0]:.2f}")
    print(f"plan: {request.base.model} on {request.base.dataset} {request.base.image_size}x{request.base.image_size}, "
          f"E={request.effective_batch}, budget {request.budget_mb:.0f} MB, amp {request.amp}, "
          f"clear_cache {request.clear_cache}, compile {request.compile}")
    totals, per_candidate, choices = [], [], []
    for repeat in range(args.repeats):
        print(f"repeat {repeat + 1}:")
        total, steps, plan = _one_plan(request)
        totals.append(total)
        per_candidate += steps
        choices.append(plan.recommended)
        print(format_table(plan))
        print(summary(plan))
        print(f"total time: {total:.1f} s for {len(plan.candidates)} candidates")
        for options in request.options:
            count = sum(1 for c in plan.candidates if c.options == options)
            print(f"  {options.label():<24} {count} candidates (bound {most_measurements(request.effective_batch)}, "
                  f"{len(divisors(request.effective_batch))} divisors of E)")
    quartiles = statistics.quantiles(per_candidate, n=4, method="inclusive") if len(per_candidate) > 1 else [0, 0, 0]
    print(f"seconds per candidate: median {statistics.median(per_candidate):.2f} "
          f"(quartiles {quartiles[0]:.2f}-{quartiles[2]:.2f}) over {len(per_candidate)}")
    print(f"total time per plan: median {statistics.median(totals):.1f} s over {len(totals)} repeat(s)")
    picks = [f"{c.options.label()} b={c.micro_batch_size}" if c else "none" for c in choices]
    print("recommendations: " + ", ".join(picks))
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

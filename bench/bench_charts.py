"""Server-side cost of drawing the dashboard for a long run: every chart built and serialised to JSON.

st.plotly_chart ships fig.to_json() to the browser, so one repeat is build_figures(...) for all
charts plus to_json() of each figure. The run is synthetic: 50,000 optimizer steps with every
metrics.csv column (a decaying noisy loss, an fp16 scale with ~50 skipped steps, memory, throughput)
and an evaluation every 500 steps. One run is the target (< 0.5 s median); three overlaid runs are
what the comparison view draws. The per-point baseline (an undecimated loss chart) is timed in the
same process, so the ratio holds even when the machine drifts.

    python bench/bench_charts.py [--steps 50000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gaccum_core.views.charts import build_figures  # noqa: E402
from gaccum_core.views.series import RunSeries  # noqa: E402
from gaccum_core.train.metrics import EVAL_COLUMNS, STEP_COLUMNS  # noqa: E402

TARGET_S = 0.5


def synthetic_run(steps: int, seed: int, skips: int = 50, eval_every: int = 500) -> RunSeries:
    """A realistic fp16 run of `steps` optimizer steps (b=32, k=4 on a CUDA device)."""
    rng = np.random.default_rng(seed)
    step = np.arange(1, steps + 1)
    samples = np.full(steps, 128)
    skipped = np.zeros(steps, dtype=int)
    skipped[rng.choice(steps, size=skips, replace=False)] = 1
    # The scale used at a step halves after each skip and doubles after 2000 clean steps.
    skipped_before = np.cumsum(skipped) - skipped
    scale = 65536.0 * 2.0 ** (np.minimum(step // 2000, 8) - skipped_before)
    step_time = rng.gamma(20, 0.0025, steps)
    loss = 2.3 * np.exp(-step / (steps / 5)) + 0.1 + rng.normal(0, 0.05, steps)
    loss[rng.integers(steps)] = 9.0  # one spike the decimation must keep
    metrics = pd.DataFrame({
        "step": step, "epoch": step // 470, "micro_batches": 4, "samples": samples,
        "samples_seen": np.cumsum(samples), "loss": loss, "lr": 1e-3 * np.cos(step / steps * np.pi / 2),
        "grad_norm": np.where(skipped == 1, np.inf, rng.lognormal(0, 0.3, steps)), "scale": scale,
        "skipped": skipped, "skipped_total": np.cumsum(skipped),
        "mem_allocated_mb": 812 + rng.normal(0, 2, steps), "mem_reserved_mb": 1024.0,
        "mem_peak_mb": 1410 + rng.normal(0, 5, steps), "activation_mb": 540.0,
        "cache_clear_s": 0.0, "step_time_s": step_time, "samples_per_s": samples / step_time,
        "wall_time_s": np.cumsum(step_time),
    }).reindex(columns=list(STEP_COLUMNS))  # columns a synthetic run has no figure for stay empty
    at = step[eval_every - 1::eval_every]
    evals = pd.DataFrame({"epoch": at // 470, "step": at, "test_loss": loss[at - 1],
                          "test_accuracy": 0.98 - 0.8 * np.exp(-at / (steps / 5)),
                          "wall_time_s": metrics["wall_time_s"].to_numpy()[at - 1] + 0.2})
    evals = evals.reindex(columns=list(EVAL_COLUMNS))  # columns a synthetic run has no figure for stay empty
    return RunSeries(f"run{seed}", f"b=32 k=4 fp16 #{seed}", metrics, evals)


def draw(runs: list[RunSeries]) -> int:
    """Build every chart and serialise it as st.plotly_chart does; returns the JSON size in bytes."""
    return sum(len(figure.to_json()) for figure in build_figures(runs, "samples_seen", 0.6).values())


def draw_from_rows(rows: tuple[list[dict], list[dict]]) -> int:
    """The Train page's whole path: the runner's row dicts -> DataFrames (as ui.series) -> charts -> JSON."""
    metrics, evals = rows
    return draw([RunSeries("live", "live run", pd.DataFrame(list(metrics)), pd.DataFrame(list(evals)))])


def draw_undecimated(run: RunSeries) -> int:
    """The baseline: one loss line with all its points, serialised."""
    figure = go.Figure(go.Scatter(x=run.metrics["samples_seen"].to_numpy(), y=run.metrics["loss"].to_numpy()))
    return len(figure.to_json())


def timed(function, argument, repeats: int) -> tuple[list[float], int]:
    """Seconds of each repeat and the result of the last."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = function(argument)
        times.append(time.perf_counter() - start)
    return times, result


def main() -> None:
    """Time one run and three overlaid runs; print each repeat, the medians and the target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    runs = [synthetic_run(args.steps, seed) for seed in range(3)]
    draw(runs[:1])  # warm-up: plotly loads its template and validators once per process
    one, size = timed(draw, runs[:1], args.repeats)
    three, size3 = timed(draw, runs, args.repeats)
    base, base_size = timed(draw_undecimated, runs[0], args.repeats)
    rows = (runs[0].metrics.to_dict("records"), runs[0].evals.to_dict("records"))
    live, _ = timed(draw_from_rows, rows, args.repeats)
    print(f"{args.steps} optimizer steps, {args.repeats} repeats, all charts built + to_json()")
    print("1 run   :", " ".join(f"{t:.3f}" for t in one), f"s; median {statistics.median(one):.3f} s,"
          f" JSON {size / 1024:.0f} KB")
    print("3 runs  :", " ".join(f"{t:.3f}" for t in three), f"s; median {statistics.median(three):.3f} s,"
          f" JSON {size3 / 1024:.0f} KB")
    print(f"baseline: one undecimated loss line, median {statistics.median(base):.3f} s, JSON {base_size / 1024:.0f} KB"
          f" (all charts / baseline = {statistics.median(one) / statistics.median(base):.1f}x)")
    print("from rows:", " ".join(f"{t:.3f}" for t in live), f"s; median {statistics.median(live):.3f} s"
          " (the Train page's path: runner row dicts -> DataFrames -> charts -> JSON)")
    worst = max(statistics.median(one), statistics.median(live))
    verdict = "OK" if worst < TARGET_S else "TOO SLOW"
    print(f"target  : 1-run median < {TARGET_S} s (both paths) -> {verdict}")


if __name__ == "__main__":
    main()

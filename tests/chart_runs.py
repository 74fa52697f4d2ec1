"""Hand-made runs the chart tests draw: step and evaluation rows with every column, one process or DDP."""

import numpy as np
import pandas as pd

from gaccum_core.train.metrics import EVAL_COLUMNS, STEP_COLUMNS
from gaccum_core.views.series import RunSeries


def metrics(n, fp16=False, cuda=False, seed=0):
    """n hand-made optimizer-step rows with every STEP_COLUMN."""
    rng = np.random.default_rng(seed)
    step = np.arange(1, n + 1)
    skipped = np.zeros(n, dtype=int)
    if fp16:
        skipped[[0, n // 2]] = 1
    frame = pd.DataFrame({
        "step": step, "epoch": step // 100, "micro_batches": 4, "samples": 32, "samples_seen": step * 32,
        "loss": 2 * np.exp(-step / max(n, 1)) + rng.normal(0, 0.1, n), "lr": 1e-3,
        "grad_norm": rng.uniform(0.5, 2, n),
        "scale": 65536.0 / 2.0 ** (np.cumsum(skipped) - skipped) if fp16 else np.nan,
        "skipped": skipped, "skipped_total": np.cumsum(skipped),
        "mem_allocated_mb": 100.0, "mem_reserved_mb": 200.0 if cuda else np.nan, "mem_peak_mb": 150.0,
        "activation_mb": 20.0, "cache_clear_s": 0.0, "step_time_s": 0.01, "samples_per_s": 3200.0,
        "wall_time_s": step * 0.01, "world_size": 1, "allreduce_calls": 0, "allreduce_bytes": 0,
        "tokens": np.nan, "tokens_seen": np.nan, "tokens_per_s": np.nan,
        "weights_mb": 1.0, "gradients_mb": 1.0, "optimizer_mb": 2.0, "train_mem_mb": 24.0,
        "reduce_scatter_calls": 0, "reduce_scatter_bytes": 0, "all_gather_calls": 0, "all_gather_bytes": 0,
        "grad_kept_mb": 1.0,
    })
    return frame[list(STEP_COLUMNS)]


def evals(steps):
    return pd.DataFrame({"epoch": 0, "step": steps, "test_loss": 1.0,
                         "test_accuracy": np.linspace(0.5, 0.9, len(steps)),
                         "wall_time_s": np.asarray(steps) * 0.01 + 0.5, "perplexity": np.nan, "eval_samples": 64,
                         "eval_tokens": np.nan})[list(EVAL_COLUMNS)]


def run(n, label="run", evals_at=(), **kind):
    return RunSeries(run_id=label, label=label, metrics=metrics(n, **kind), evals=evals(list(evals_at)))


def ddp_run(n, label="ddp", evals_at=(), **kind):
    """A 2-process DDP run: one all-reduce of a 4 MB gradient per step, figures per rank."""
    frame = metrics(n, **kind).assign(world_size=2, allreduce_calls=1, allreduce_bytes=4 * 2**20)
    return RunSeries(run_id=label, label=label, metrics=frame, evals=evals(list(evals_at)))


def empty_run():
    return RunSeries("empty", "empty", pd.DataFrame(columns=STEP_COLUMNS), pd.DataFrame(columns=EVAL_COLUMNS))


def annotations(figure):
    return [a.text for a in figure.layout.annotations]

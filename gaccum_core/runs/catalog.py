"""The runs on disk as a table: settings, state and final figures per run, damaged runs included."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from gaccum_core.config import HF_PREFIX, RunConfig, is_factory, is_hf
from gaccum_core.runs.claim import owner
from gaccum_core.runs.integrity import DamagedRun, read_run
from gaccum_core.runs.store import RunStore
from gaccum_core.states import FINAL_STATES, RunState

SETTINGS = ("model", "dataset", "micro_batch_size", "accum_steps", "reduction", "amp", "init_scale",
            "grad_clip", "clear_cache", "compile", "optimizer", "lr", "lr_schedule", "seed")


def short_model(model: str) -> str:
    """A model's name without the folders of its path: hf:DIR and FILE.py:FUNCTION by their last part."""
    if is_hf(model):
        return HF_PREFIX + Path(model.removeprefix(HF_PREFIX)).name
    where, _, function = model.rpartition(":")
    return f"{Path(where).name}:{function}" if is_factory(model) and where.endswith(".py") else model


def run_label(config: RunConfig) -> str:
    """A short legend text naming what usually differs between compared runs."""
    model = f"gpt-{config.gpt_preset}" if config.model == "gpt" else short_model(config.model)
    parts = [model, f"b={config.micro_batch_size}", f"k={config.accum_steps}"]
    if config.amp != "off":
        parts.append(config.amp)
    if config.reduction != "mean":
        parts.append(config.reduction)
    if config.clear_cache != "off":
        parts.append(f"clear={config.clear_cache}")
    if config.compile != "off":
        parts.append(f"compile={config.compile}")
    if config.world_size > 1:
        parts.append(f"N={config.world_size}")
    return " ".join(parts)


# Settings a label always names; any other field is named only where the labelled runs differ in it.
_ALWAYS = ("model", "micro_batch_size", "accum_steps")
_SHORT = {"micro_batch_size": "b", "accum_steps": "k"}
_NEVER = ("device", "data_dir", "download", "text_file_max_mb")  # where a run ran, not what it trained


def run_labels(configs: Sequence[RunConfig]) -> list[str]:
    """One legend text per run: model, b and k, plus every other setting in which these runs differ."""
    fields = [f.name for f in dataclasses.fields(RunConfig) if f.name not in _ALWAYS + _NEVER]
    differing = [name for name in fields if len({getattr(c, name) for c in configs}) > 1]
    return [" ".join([short_model(c.model), *(f"{_SHORT[n]}={getattr(c, n)}" for n in _ALWAYS[1:]),
                      *(f"{n}={getattr(c, n)}" for n in differing)]) for c in configs]


def settings_table(configs: dict[str, RunConfig]) -> tuple[pd.DataFrame, list[str]]:
    """Every setting (rows) of each run (columns), and the settings in which the runs differ."""
    table = pd.DataFrame({run_id: dataclasses.asdict(c) for run_id, c in configs.items()})
    differing = [name for name, row in table.iterrows() if row.astype(str).nunique() > 1]
    return table, differing


def _summary(metrics: pd.DataFrame, evals: pd.DataFrame) -> dict[str, object]:
    last = metrics.iloc[-1] if len(metrics) else None
    return {
        "steps": len(metrics),
        "final_loss": None if last is None else last["loss"],
        "test_accuracy": evals["test_accuracy"].iloc[-1] if len(evals) else None,
        "peak_mem_mb": metrics["mem_peak_mb"].max() if len(metrics) else None,
        "samples_per_s": metrics["samples_per_s"].median() if len(metrics) else None,
        # Language runs: tokens/s and the last validation perplexity (empty for image runs).
        "tokens_per_s": metrics["tokens_per_s"].median() if len(metrics) else None,
        "perplexity": evals["perplexity"].iloc[-1] if len(evals) else None,
        "skipped": int(last["skipped_total"]) if last is not None else 0,
    }


def describe_run(store: RunStore, run_id: str, live: Iterable[str] = ()) -> dict[str, object]:
    """One table row for a run; a run that cannot be read is 'damaged' with the reason, one queued or
    running on disk that no live process owns is 'interrupted'."""
    row: dict[str, object] = {"run_id": run_id}
    try:
        files = read_run(store, run_id)
    except DamagedRun as exc:
        return {**row, "state": RunState.DAMAGED, "message": str(exc)[:300]}
    status, config = files.status, files.config
    state, message = status["state"], status.get("message", "")
    if state not in FINAL_STATES and run_id not in set(live):
        who = owner(store.path(run_id), status)  # another server, command line or worker trains it
        if who is None:
            state = RunState.INTERRUPTED  # no runner owns it any more: its server or command line stopped
        else:
            message = f"training in {who}"
    row.update(state=state, name=status.get("name", ""), message=message,
               created=status.get("created", ""),
               label=run_label(config), **{k: getattr(config, k) for k in SETTINGS},
               effective_batch=config.effective_batch_size, world_size=config.world_size,
               **_summary(files.metrics, files.evals))
    return row


def run_table(store: RunStore, live: Iterable[str] = ()) -> pd.DataFrame:
    """Every run on disk, newest first."""
    live = set(live)
    rows = [describe_run(store, run_id, live) for run_id in reversed(store.list_runs())]
    return pd.DataFrame(rows)


def combined_csv(store: RunStore, run_ids: Iterable[str], table: str = "metrics") -> str:
    """The metrics (or evals) of several runs in one CSV: each row carries its run's id and every
    setting, prefixed config_ so that no setting collides with a metric (config_lr beside lr)."""
    read = {"metrics": store.read_metrics, "evals": store.read_evals}[table]
    frames = []
    for run_id in run_ids:
        config = store.read_config(run_id)
        frame = read(run_id)
        settings = {"run_id": run_id, **{f"config_{k}": v for k, v in dataclasses.asdict(config).items()}}
        frames.append(frame.assign(**settings)[[*settings, *frame.columns]])
    if not frames:
        return ""
    buffer = io.StringIO()
    pd.concat(frames, ignore_index=True).to_csv(buffer, index=False)
    return buffer.getvalue()


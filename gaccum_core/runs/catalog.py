"""The runs on disk as a table: settings, state and final figures per run, damaged runs included."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from gaccum_core.config import RunConfig
from gaccum_core.train.metrics import EVAL_COLUMNS, STEP_COLUMNS
from gaccum_core.states import FINAL_STATES, RunState
from gaccum_core.runs.store import RunStore

SETTINGS = ("model", "dataset", "micro_batch_size", "accum_steps", "reduction", "amp", "init_scale",
            "grad_clip", "clear_cache", "compile", "optimizer", "lr", "lr_schedule", "seed")


def run_label(config: RunConfig) -> str:
    """A short legend text naming what usually differs between compared runs."""
    model = f"gpt-{config.gpt_preset}" if config.is_text else config.model
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
_NEVER = ("device", "data_dir", "download")  # where a run ran, not what it trained


def run_labels(configs: Sequence[RunConfig]) -> list[str]:
    """One legend text per run: model, b and k, plus every other setting in which these runs differ."""
    fields = [f.name for f in dataclasses.fields(RunConfig) if f.name not in _ALWAYS + _NEVER]
    differing = [name for name in fields if len({getattr(c, name) for c in configs}) > 1]
    return [" ".join([c.model, *(f"{_SHORT[n]}={getattr(c, n)}" for n in _ALWAYS[1:]),
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


def _few(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", …" if len(names) > 3 else "")


def _object(status: object) -> dict:
    if not isinstance(status, dict):
        raise ValueError(f"holds a JSON {type(status).__name__}, not an object")
    return status


def _table(frame: pd.DataFrame, columns: tuple[str, ...], filled: tuple[str, ...]) -> pd.DataFrame:
    """frame if it has every column, numbers only and finite `filled` cells in every row; else ValueError."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"lacks {len(missing)} of its {len(columns)} columns ({_few(missing)}): "
                         "its header row is missing or edited")
    if len(frame):
        text = [c for c in columns if not pd.api.types.is_numeric_dtype(frame[c])]
        if text:
            raise ValueError(f"holds text where numbers belong ({_few(text)})")
        empty = [c for c in filled if not np.isfinite(frame[c].to_numpy(dtype=float)).all()]
        if empty:
            raise ValueError(f"has a row without {', '.join(empty)}: a truncated or edited row")
    return frame


def _read(store: RunStore, run_id: str) -> tuple[dict, RunConfig, pd.DataFrame, pd.DataFrame]:
    """status, config, metrics and evals of a run, each checked to be what the run store writes;
    ValueError naming the file that is not."""
    readers = {
        "status.json": lambda: _object(store.read_status(run_id)),
        "config.json": lambda: store.read_config(run_id),
        "metrics.csv": lambda: _table(store.read_metrics(run_id), STEP_COLUMNS, ("step", "skipped_total")),
        "eval.csv": lambda: _table(store.read_evals(run_id), EVAL_COLUMNS, ("step",)),
    }
    parts = []
    for name, read in readers.items():
        try:
            parts.append(read())
        except (OSError, ValueError) as exc:  # ConfigError, JSON, pandas and decoding errors are ValueErrors
            raise ValueError(f"{name}: {exc}") from exc
    return tuple(parts)  # type: ignore[return-value]


def describe_run(store: RunStore, run_id: str, live: Iterable[str] = ()) -> dict[str, object]:
    """One table row for a run; a run that cannot be read is 'damaged' with the reason."""
    row: dict[str, object] = {"run_id": run_id}
    try:
        status, config, metrics, evals = _read(store, run_id)
    except ValueError as exc:
        return {**row, "state": RunState.DAMAGED, "message": str(exc).strip()[:300]}
    state = status.get("state", "?")
    if state not in FINAL_STATES and run_id not in set(live):
        # Queued or running on disk, but no runner in this process owns it: the server stopped.
        state = RunState.INTERRUPTED
    row.update(state=state, name=status.get("name", ""), message=status.get("message", ""),
               created=status.get("created", ""),
               label=run_label(config), **{k: getattr(config, k) for k in SETTINGS},
               effective_batch=config.effective_batch_size, world_size=config.world_size,
               **_summary(metrics, evals))
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


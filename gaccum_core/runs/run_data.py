"""What a page draws of the runs picked: each run's settings, tables (as frames and as written) and the weights it
started from, read together; and several runs' tables in one CSV."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterable, Mapping

import pandas as pd

from gaccum_core.config import RunConfig
from gaccum_core.runs.store import RunStore, StoreError
from gaccum_core.runs.store import known_settings


@dataclasses.dataclass(frozen=True)
class RunData:
    """What a page draws of a run, read together: its settings, its metrics and evaluations as tables and as
    written (for downloads), and the weights it started from."""

    config: RunConfig
    metrics: pd.DataFrame
    evals: pd.DataFrame
    metrics_csv: bytes
    evals_csv: bytes
    weights: str = ""  # status.json's: a weights file with its sha256, an hf: model's file, or the seed's draw
    known: frozenset[str] | None = None  # an imported run's settings its hparams named (known_settings)
    norm_c: int | None = None  # seq-mean-token-sum-norm's C as the run recorded it (constant_used)


def read_runs(store: RunStore, run_ids: Iterable[str]) -> tuple[dict[str, RunData], list[str]]:
    """Each run's data, and apart the runs deleted meanwhile (a file gone as it was read: in another tab,
    session or process)."""
    found, removed = {}, []
    for run_id in run_ids:
        try:
            found[run_id] = RunData(store.read_config(run_id), store.read_metrics(run_id), store.read_evals(run_id),
                                    store.metrics_csv(run_id), store.evals_csv(run_id), started_from(store, run_id),
                                    _known(store, run_id), constant_used(store, run_id))
        except FileNotFoundError:
            removed.append(run_id)
    return found, removed


def started_from(store: RunStore, run_id: str) -> str:
    """The weights a run started from, as its status says them ('weights loaded from x.pth (sha256 …), fc reset to
    3 classes', or the seed); '' before it started, or when its status cannot be read meanwhile."""
    try:
        return str(store.read_status(run_id).get("weights", ""))
    except (StoreError, OSError, ValueError):  # deleted or damaged meanwhile: the Runs page says so
        return ""


def constant_used(store: RunStore, run_id: str) -> int | None:
    """seq-mean-token-sum-norm's C as the run recorded it in status.json when it started (loss_agg_norm 0: the
    longest completion, computed then); None for another mode, before it started, or a status unreadable meanwhile."""
    try:
        used = store.read_status(run_id).get("loss_agg_norm")
    except (StoreError, OSError, ValueError):
        return None
    return used if isinstance(used, int) and not isinstance(used, bool) else None


def constant_words(config: RunConfig, used: int) -> str:
    """The C a run used, in the pages' words: 'C = 34, the longest completion in the training split' for
    loss_agg_norm 0, else 'C = 64'."""
    return f"C = {used}" + (", the longest completion in the training split" if config.loss_agg_norm == 0 else "")


def _known(store: RunStore, run_id: str) -> frozenset[str] | None:
    """An imported run's settings its hparams named; None for a run of gaccum's (or a status.json damaged meanwhile)."""
    try:
        return known_settings(store.read_status(run_id))
    except (StoreError, ValueError):
        return None


def combined_csv(store: RunStore, run_ids: Iterable[str], table: str = "metrics") -> str:
    """The metrics (or evals) of several runs in one CSV, as tables_csv writes them."""
    read = {"metrics": store.read_metrics, "evals": store.read_evals}[table]
    return tables_csv({run_id: (store.read_config(run_id), read(run_id)) for run_id in run_ids})


def tables_csv(tables: Mapping[str, tuple[RunConfig, pd.DataFrame]]) -> str:
    """Several runs' tables (metrics or evals) in one CSV: each row carries its run's id and every setting,
    prefixed config_ so that no setting collides with a metric (config_lr beside lr)."""
    frames = []
    for run_id, (config, frame) in tables.items():
        settings = {"run_id": run_id, **{f"config_{k}": v for k, v in dataclasses.asdict(config).items()}}
        frames.append(frame.assign(**settings)[[*settings, *frame.columns]])
    if not frames:
        return ""
    buffer = io.StringIO()
    pd.concat(frames, ignore_index=True).to_csv(buffer, index=False)
    return buffer.getvalue()

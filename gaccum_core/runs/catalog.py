"""The runs on disk as a table: settings, state and final figures per run, damaged runs included."""

from __future__ import annotations

import dataclasses
import io
import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from gaccum_core.config import HF_PREFIX, RunConfig, is_factory, is_hf
from gaccum_core.runs.claim import owner
from gaccum_core.runs.integrity import DamagedRun, read_run
from gaccum_core.runs.store import RunStore, StoreError
from gaccum_core.states import FINAL_STATES, RunState

SETTINGS = ("model", "dataset", "micro_batch_size", "accum_steps", "reduction", "amp", "init_scale",
            "grad_clip", "clear_cache", "compile", "optimizer", "lr", "lr_schedule", "seed")


def short_model(model: str) -> str:
    """A model's name without the folders of its path: hf:DIR and FILE.py:FUNCTION by their last part."""
    if is_hf(model):
        return HF_PREFIX + Path(model.removeprefix(HF_PREFIX)).name
    where, _, function = model.rpartition(":")
    return f"{Path(where).name}:{function}" if is_factory(model) and where.endswith(".py") else model


# One vocabulary for a run's settings in legends, status lines and tables: the model as it is called
# (gpt-tiny), b and k, the precision whenever amp is on (fp16), the processes as N, sharding with its sync
# (fsdp/last, reshard off; ddp beside an fsdp run), activation checkpointing when on (ckpt/full, ckpt/selective/2),
# any other setting as field=value (clear_cache=step).
_USUAL = ("amp", "reduction", "clear_cache", "compile", "world_size", "sharding",  # named whenever not the default
          "activation_checkpointing")
_ALWAYS = ("model", "micro_batch_size", "accum_steps")
_NEVER = ("device", "data_dir", "download", "text_file_max_mb", "cache_dir")  # where a run ran, not what it trained
# The data sets whose data_dir is what they train on (not where a named data set is kept): it tells runs apart.
_DATA_IN_DATA_DIR = ("imagefolder", "tokens", "hf-dataset")
# Said by the model's name (gpt-tiny), by N, and by the sharding's text (fsdp/last reshard off).
_IN_OTHERS = ("gpt_preset", "nproc", "nnodes", "fsdp_sync", "fsdp_reshard_after_backward", "ac_every")
_DEFAULT = RunConfig()


def _model_text(config: RunConfig) -> str:
    return f"gpt-{config.gpt_preset}" if config.model == "gpt" else short_model(config.model)


def setting_text(name: str, config: RunConfig) -> str:
    """One setting of a run in the labels' words: b=8, k=4, fp16, N=2, clear_cache=step."""
    if name == "model":
        return _model_text(config)
    if name == "amp":
        return config.amp
    if name == "world_size":
        return f"N={config.world_size}"
    if name == "sharding":
        return _sharding_text(config)
    if name == "activation_checkpointing":  # ckpt/full; selective with its N: ckpt/selective/2
        every = f"/{config.ac_every}" if config.activation_checkpointing == "selective" else ""
        return f"ckpt/{config.activation_checkpointing}{every}"
    short = {"micro_batch_size": "b", "accum_steps": "k"}.get(name, name)
    return f"{short}={getattr(config, name)}"


def _sharding_text(config: RunConfig) -> str:
    """ddp, or fsdp with when it reduce-scatters (fsdp/every, fsdp/last) and 'reshard off' when it keeps weights."""
    if config.sharding != "fsdp":
        return config.sharding
    reshard = " reshard off" if config.fsdp_reshard_after_backward == "off" else ""
    return f"fsdp/{config.fsdp_sync}{reshard}"


def _usual(config: RunConfig) -> list[str]:
    """The settings a label names whenever they are not the default (fp16 whenever amp is on)."""
    return [name for name in _USUAL if getattr(config, name) != getattr(_DEFAULT, name)]


def run_label(config: RunConfig) -> str:
    """A short legend text naming what usually differs between compared runs: model, b, k, and the
    precision, reduction, cache clearing, compilation and processes when not the default."""
    return " ".join(setting_text(name, config) for name in (*_ALWAYS, *_usual(config)))


def _differing(configs: Sequence[RunConfig]) -> list[str]:
    """The settings (RunConfig's order) in which these runs differ, but those a label names anyway (the
    usual ones are named where not the default: fp16 against nothing says amp=off)."""
    skip = {*_ALWAYS, *_USUAL, *_NEVER, *_IN_OTHERS}
    if any(c.dataset in _DATA_IN_DATA_DIR for c in configs):
        skip.discard("data_dir")
    fields = [f.name for f in dataclasses.fields(RunConfig) if f.name not in skip]
    return [name for name in fields if len({getattr(c, name) for c in configs}) > 1]


def created_text(run_id: str) -> str:
    """When the run was created, from its id (UTC time, then a random part): "run of 14:03:05", in
    this machine's time zone; the id itself when it holds no time."""
    try:
        created = datetime.strptime(run_id[:15], "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return run_id
    return f"run of {created.astimezone():%H:%M:%S}"


def run_labels(configs: Sequence[RunConfig], names: Sequence[str] | None = None,
               run_ids: Sequence[str] | None = None) -> list[str]:
    """One legend text per run: model, b and k, the usual settings (run_label), every other setting in
    which these runs differ, then the run's name if it has one. Runs that still share a label are told
    apart by when they were created (from run_ids), never by the end of their id."""
    differing = _differing(configs)
    say_ddp = len({c.sharding for c in configs}) > 1  # ddp, the default, is named beside an fsdp run
    labels = []
    for i, config in enumerate(configs):
        ddp = ["ddp"] if say_ddp and config.sharding == "ddp" else []
        text = " ".join([run_label(config), *ddp, *(setting_text(n, config) for n in differing)])
        name = names[i] if names is not None else ""
        labels.append(f"{text} · {name}" if name else text)
    return _told_apart(labels, run_ids)


def _told_apart(labels: list[str], run_ids: Sequence[str] | None) -> list[str]:
    """labels with each repeated one followed by its run's creation time (and a count when even that repeats)."""
    if run_ids is None:
        return labels
    repeated = {label for label in labels if labels.count(label) > 1}
    told = [f"{label} · {created_text(run_id)}" if label in repeated else label
            for label, run_id in zip(labels, run_ids)]
    still = {label for label in told if told.count(label) > 1}  # created in the same second
    seen: dict[str, int] = {}
    for i, label in enumerate(told):
        if label in still:
            seen[label] = seen.get(label, 0) + 1
            told[i] = f"{label} ({seen[label]})"
    return told


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
    try:
        tags = tuple(store.read_tags(run_id))
    except StoreError as exc:  # the run itself reads: the page can write its tags anew
        tags, message = (), f"{message}; {exc}" if message else str(exc)
    summary = _summary(files.metrics, files.evals)
    total = status.get("total_steps")
    row.update(state=state, name=status.get("name", ""), message=message, tags=tags,
               created=status.get("created", ""),
               label=run_label(config), **{k: getattr(config, k) for k in SETTINGS},
               effective_batch=config.effective_batch_size, world_size=config.world_size,
               total_steps=total, progress=min(summary["steps"] / total, 1.0) if total else None, **summary)
    return row


def unstepped(table: pd.DataFrame) -> pd.Series:
    """Which runs ended (or were interrupted) without an optimizer step: stopped or failed before their first."""
    if table.empty:
        return pd.Series(dtype=bool)
    ended = table["state"].isin([*FINAL_STATES, RunState.INTERRUPTED])
    return ended & (table["steps"].fillna(0) == 0) & (table["state"] != RunState.DAMAGED)


# The rows of ended and damaged runs, kept while none of their files changes: a page refreshed every second
# while a run goes then reads only the runs that change, not every run on disk.
_ENDED_ROWS: dict[Path, tuple[tuple, dict[str, object]]] = {}


def _files_signature(run_dir: Path) -> tuple:
    """Each file of a run directory by name, inode, size and modification time (an atomic replace is a new inode)."""
    try:
        with os.scandir(run_dir) as entries:
            return tuple(sorted((e.name, e.inode(), e.stat().st_size, e.stat().st_mtime_ns)
                                for e in entries if e.is_file()))
    except OSError:
        return ()


def _row(store: RunStore, run_id: str, live: set[str]) -> dict[str, object]:
    """describe_run's row, read again only when the run goes on or one of its files changed."""
    run_dir = store.path(run_id).resolve()
    signature = _files_signature(run_dir)
    kept = _ENDED_ROWS.get(run_dir)
    if kept is not None and kept[0] == signature and signature:
        return kept[1]
    row = describe_run(store, run_id, live)
    if row["state"] in FINAL_STATES or row["state"] == RunState.DAMAGED:
        _ENDED_ROWS[run_dir] = (signature, row)
    return row


def run_table(store: RunStore, live: Iterable[str] = (), hide_unstepped: bool = False) -> pd.DataFrame:
    """Every run on disk, newest first; hide_unstepped leaves out the runs that ended without a step
    (stopped or failed before their first), which only clutter a summary such as the home page's."""
    live, run_ids = set(live), store.list_runs()
    rows = [_row(store, run_id, live) for run_id in reversed(run_ids)]
    # A run deleted after the listing (in another tab, session or process) reads as missing: gone, not damaged.
    rows = [row for row in rows if row["state"] != RunState.DAMAGED or store.path(str(row["run_id"])).is_dir()]
    listed, root = {store.path(r).resolve() for r in run_ids}, store.root.resolve()
    for run_dir in list(_ENDED_ROWS):  # deleted runs are forgotten
        if run_dir.parent == root and run_dir not in listed:
            _ENDED_ROWS.pop(run_dir, None)
    table = pd.DataFrame(rows)
    return table[~unstepped(table)].reset_index(drop=True) if hide_unstepped else table


def all_tags(table: pd.DataFrame) -> list[str]:
    """Every tag of the runs in the table, sorted."""
    if "tags" not in table:
        return []
    return sorted({tag for tags in table["tags"] if isinstance(tags, tuple) for tag in tags})


def filter_runs(table: pd.DataFrame, text: str = "", states: Iterable[str] = (),
                tags: Iterable[str] = ()) -> pd.DataFrame:
    """The runs whose id, name, label, tags or message contain text (any case), whose state is one of
    states, and that carry every one of tags; an empty filter keeps every run."""
    keep = pd.Series(True, index=table.index)
    states, tags = list(states), set(tags)
    if states:
        keep &= table["state"].isin(states)
    if tags:
        keep &= table["tags"].map(lambda own: isinstance(own, tuple) and tags <= set(own))
    if text.strip():
        words = text.strip().casefold()
        searched = [c for c in ("run_id", "name", "label", "message") if c in table]
        haystack = table[searched].fillna("").astype(str).agg(" ".join, axis=1)
        if "tags" in table:
            haystack += " " + table["tags"].map(lambda own: " ".join(own) if isinstance(own, tuple) else "")
        keep &= haystack.str.casefold().str.contains(words, regex=False)
    return table[keep]


@dataclasses.dataclass(frozen=True)
class RunData:
    """What a page draws of a run, read together: its settings, its metrics and evaluations as tables and as
    written (for downloads)."""

    config: RunConfig
    metrics: pd.DataFrame
    evals: pd.DataFrame
    metrics_csv: bytes
    evals_csv: bytes


def read_runs(store: RunStore, run_ids: Iterable[str]) -> tuple[dict[str, RunData], list[str]]:
    """Each run's data, and apart the runs deleted meanwhile (a file gone as it was read: in another tab,
    session or process)."""
    found, removed = {}, []
    for run_id in run_ids:
        try:
            found[run_id] = RunData(store.read_config(run_id), store.read_metrics(run_id), store.read_evals(run_id),
                                    store.metrics_csv(run_id), store.evals_csv(run_id))
        except FileNotFoundError:
            removed.append(run_id)
    return found, removed


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

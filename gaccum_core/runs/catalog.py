"""The runs on disk as a table: settings, state and final figures per run, damaged runs included."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Collection, Iterable, Mapping
from typing import NamedTuple

import pandas as pd

from gaccum_core.config import RunConfig, fields_with
from gaccum_core.runs.claim import owner
from gaccum_core.runs.index import Progress, Row, RunIndex, code_digest
from gaccum_core.runs.integrity import DamagedRun, read_run
from gaccum_core.runs.labels import run_label, run_labels
from gaccum_core.runs.run_data import constant_words
from gaccum_core.runs.store import RunStore, StoreError
from gaccum_core.runs.store import known_settings
from gaccum_core.states import FINAL_STATES, RunState
from gaccum_core.train.metrics import last_epoch_loss

SETTINGS = fields_with("column")  # the runs table's settings columns
_DEFAULT = RunConfig()


def settings_table(configs: dict[str, RunConfig], started: Mapping[str, str] | None = None,
                   known: Mapping[str, Collection[str] | None] | None = None,
                   constants: Mapping[str, int | None] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Every setting (rows) of each run (columns), then the weights each started from (RunData.weights) when given,
    and the settings in which the runs differ. known: an imported run's settings its hparams named (RunData.known),
    its other cells empty and differing from none. constants: the C each run recorded (RunData.norm_c), said
    beside its loss_agg_norm."""
    table = pd.DataFrame({run_id: dataclasses.asdict(c) for run_id, c in configs.items()}).astype(object)
    for run_id, used in (constants or {}).items():
        if used is not None and run_id in table.columns:
            config = configs[run_id]
            table.loc["loss_agg_norm", run_id] = f"{config.loss_agg_norm} ({constant_words(config, used)})"
    if started is not None:
        table.loc["weights"] = [started.get(run_id, "") for run_id in table.columns]
    for run_id, sure in (known or {}).items():
        if sure is not None and run_id in table.columns:
            table[run_id] = table[run_id].astype(object).where(table.index.isin(list(sure)), None)
    differing = [name for name, row in table.iterrows() if row.dropna().astype(str).nunique() > 1]
    return table.fillna(""), differing


def _summary(metrics: pd.DataFrame, evals: pd.DataFrame) -> dict[str, object]:
    last = metrics.iloc[-1] if len(metrics) else None
    return {
        "steps": len(metrics),
        "final_loss": None if last is None else last_epoch_loss(metrics),  # as a sweep's summary counts it
        "test_accuracy": evals["test_accuracy"].iloc[-1] if len(evals) else None,
        # The training memory the memory chart draws and the planner counts, not the process's (on the CPU mostly
        # the interpreter: ~700 MB for every run, whatever accumulation saves).
        "peak_train_mem_mb": metrics["train_mem_mb"].max() if len(metrics) else None,
        "samples_per_s": metrics["samples_per_s"].median() if len(metrics) else None,
        # Language runs: tokens/s and the last validation perplexity (empty for image runs).
        "tokens_per_s": metrics["tokens_per_s"].median() if len(metrics) else None,
        "perplexity": evals["perplexity"].iloc[-1] if len(evals) else None,
        # An imported run's rows tell nothing of skipped steps: left empty.
        "skipped": int(last["skipped_total"]) if last is not None and pd.notna(last["skipped_total"]) else
        None if last is not None else 0,
    }


def disk_row(store: RunStore, run_id: str) -> dict[str, object]:
    """What a run's files say of it, the row the runs index keeps: its settings, status and final figures, or
    'damaged' with the reason; the pid in status.json and a tags.json that does not read kept apart (_pid,
    _tags_error) for listed_row, which asks who trains it now, and its config and known settings (_config,
    _known) for run_choices."""
    row: dict[str, object] = {"run_id": run_id}
    try:
        files = read_run(store, run_id)
    except DamagedRun as exc:
        return {**row, "state": RunState.DAMAGED, "message": str(exc)[:300]}
    status, config = files.status, files.config
    try:
        tags, tags_error = tuple(store.read_tags(run_id)), ""
    except StoreError as exc:  # the run itself reads: the page can write its tags anew
        tags, tags_error = (), str(exc)
    summary = _summary(files.metrics, files.evals)
    total = status.get("total_steps")
    row.update(state=status["state"], name=status.get("name", ""), message=status.get("message", ""), tags=tags,
               created=status.get("created", ""),
               label=run_label(config), **{k: getattr(config, k) for k in SETTINGS},
               effective_batch=config.effective_batch_size, world_size=config.world_size,
               total_steps=total, progress=min(summary["steps"] / total, 1.0) if total else None, **summary,
               _pid=status.get("pid"), _tags_error=tags_error)
    known = known_settings(status)
    row.update(_config=_config_text(config), _known=None if known is None else sorted(known))
    if known is not None:  # imported: only the settings its hparams named are its own, the others left empty
        row.update(label=run_label(config, known), **{name: None for name in SETTINGS if name not in known},
                   effective_batch=None, world_size=None)
    return row


def listed_row(store: RunStore, row: dict[str, object], live: Iterable[str] = ()) -> dict[str, object]:
    """A disk_row as the table lists it now: a run queued or running on disk that no live process owns is
    'interrupted', one another process trains says where."""
    row = {k: v for k, v in row.items() if k not in ("_config", "_known")}  # run_choices' own
    pid, tags_error = row.pop("_pid", None), row.pop("_tags_error", "")
    state, message = row["state"], row.get("message", "")
    if state not in FINAL_STATES and state != RunState.DAMAGED and row["run_id"] not in set(live):
        who = owner(store.path(str(row["run_id"])), {"pid": pid})  # another server, command line or worker
        if who is None:
            state = RunState.INTERRUPTED  # no runner owns it any more: its server or command line stopped
        else:
            message = f"training in {who}"
    if tags_error:
        message = f"{message}; {tags_error}" if message else tags_error
    row.update(state=state, message=message)
    if "tags" in row:
        row["tags"] = tuple(row["tags"])  # the index keeps them as a JSON list
    return row


def _config_text(config: RunConfig) -> str:
    """The settings of a config that are not the default, as JSON: what a runs index row keeps of it (76 characters
    where the whole config takes 968). The defaults are those of the code that computed the row: another version's
    rows are computed again (_row_code)."""
    return json.dumps({k: v for k, v in config.to_dict().items() if v != getattr(_DEFAULT, k)}, sort_keys=True)


# Checking a config takes 90 µs: 0.9 s for 10,000 runs on every draw. Each is built once per process instead, and
# shared by the runs with the same settings; the cache holds more than a runs directory's runs (a pass over more
# than it holds would miss every one).
@functools.lru_cache(maxsize=1 << 16)
def _config_of(text: str) -> RunConfig:
    """The config a row's _config_text stands for."""
    return RunConfig.from_dict(json.loads(text))


def describe_run(store: RunStore, run_id: str, live: Iterable[str] = ()) -> dict[str, object]:
    """One table row for a run, read from its files; a run that cannot be read is 'damaged' with the reason,
    one queued or running on disk that no live process owns is 'interrupted'."""
    return listed_row(store, disk_row(store, run_id), live)


def unstepped(table: pd.DataFrame) -> pd.Series:
    """Which runs ended (or were interrupted) without an optimizer step: stopped or failed before their first."""
    if table.empty:
        return pd.Series(dtype=bool)
    ended = table["state"].isin([*FINAL_STATES, RunState.INTERRUPTED])
    # A table of damaged runs only has no steps column (their rows say only why they cannot be read).
    steps = table["steps"].fillna(0) if "steps" in table else pd.Series(0, index=table.index)
    return ended & (steps == 0) & (table["state"] != RunState.DAMAGED)


@functools.cache
def _row_code() -> str:
    """The version of the code a row is computed by: the index keeps rows of other code (before an upgrade) apart."""
    return code_digest(__name__, *(d.__module__ for d in (read_run, RunConfig, last_epoch_loss, RunStore, RunState)))


def _index(store: RunStore) -> RunIndex:
    return RunIndex(store.root, _row_code())


def index_runs(store: RunStore, run_ids: Iterable[str]) -> None:
    """Bring the runs index up to date for runs this process changed (a runner, as a run ends): the next
    listing, in any process, reads none of their files."""
    _index(store).rows(list(run_ids), functools.partial(disk_row, store), every=False)


def forget_runs(store: RunStore, run_ids: Iterable[str]) -> None:
    """Drop deleted runs from the runs index."""
    _index(store).forget(run_ids)


def _rows(store: RunStore, progress: Progress | None) -> list[Row]:
    """The disk_row of every run on disk, newest first, from the runs index (gaccum_core.runs.index): only runs
    changed since they were indexed are read, and progress(done, total) follows them."""
    run_ids = list(reversed(store.list_runs()))
    return _index(store).rows(run_ids, functools.partial(disk_row, store), progress)


def run_table(store: RunStore, live: Iterable[str] = (), hide_unstepped: bool = False,
              progress: Progress | None = None) -> pd.DataFrame:
    """Every run on disk, newest first; hide_unstepped leaves out the runs that ended without a step
    (stopped or failed before their first), which only clutter a summary such as the home page's. Rows come
    from the runs index (_rows)."""
    live = set(live)
    rows = [listed_row(store, row, live) for row in _rows(store, progress)]
    # A run deleted after the listing (in another tab, session or process) reads as missing: gone, not damaged.
    rows = [row for row in rows if row["state"] != RunState.DAMAGED or store.path(str(row["run_id"])).is_dir()]
    table = pd.DataFrame(rows)
    return table[~unstepped(table)].reset_index(drop=True) if hide_unstepped else table


class RunChoice(NamedTuple):
    """A readable run as a page offers it to draw: what run_labels labels it by."""

    run_id: str
    config: RunConfig
    name: str
    known: frozenset[str] | None  # an imported run's settings its hparams named (known_settings); None for gaccum's


def run_choices(store: RunStore, progress: Progress | None = None) -> tuple[RunChoice, ...]:
    """Every readable run on disk, newest first, from the runs index as run_table's rows (a draw with nothing
    changed reads no run folder); damaged runs are left out (the Runs page says why)."""
    return tuple(RunChoice(str(row["run_id"]), _config_of(row["_config"]), str(row["name"]),
                           None if row["_known"] is None else frozenset(row["_known"]))
                 for row in _rows(store, progress) if row["state"] != RunState.DAMAGED)


@functools.lru_cache(maxsize=4)
def choice_labels(choices: tuple[RunChoice, ...]) -> tuple[str, ...]:
    """run_labels of these runs, computed again only when a run is added, deleted, renamed or changes settings:
    0.13 s for 10,000 runs (0.6 s on a loaded machine), where comparing them with the last ones takes 10 ms."""
    if not choices:
        return ()
    run_ids, configs, names, known = zip(*choices)
    return tuple(run_labels(configs, names, run_ids, known))


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
        haystack = pd.Series("", index=table.index, dtype=object)
        for column in searched:  # column by column: all rows at once (a join per row took 0.4 s for 10,000 runs)
            haystack += " " + table[column].fillna("").astype(str)
        if "tags" in table:
            haystack += " " + table["tags"].map(lambda own: " ".join(own) if isinstance(own, tuple) else "")
        keep &= haystack.str.casefold().str.contains(words, regex=False)
    return table[keep]

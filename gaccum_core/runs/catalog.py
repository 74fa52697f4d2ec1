"""The runs on disk as a table: settings, state and final figures per run, damaged runs included."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from gaccum_core.config import (HF_PREFIX, RunConfig, applies, by_field, fields_with, is_factory, is_hf,
                                short_word)
from gaccum_core.runs.claim import owner
from gaccum_core.runs.index import Progress, Row, RunIndex, code_digest
from gaccum_core.runs.integrity import DamagedRun, read_run
from gaccum_core.runs.store import RunStore, StoreError
from gaccum_core.runs.tb_import import known_settings
from gaccum_core.states import FINAL_STATES, RunState
from gaccum_core.train.metrics import last_epoch_loss

SETTINGS = fields_with("column")  # the runs table's settings columns


def short_model(model: str) -> str:
    """A model's name without the folders of its path: hf:DIR and FILE.py:FUNCTION by their last part."""
    if is_hf(model):
        return HF_PREFIX + Path(model.removeprefix(HF_PREFIX)).name
    where, _, function = model.rpartition(":")
    return f"{Path(where).name}:{function}" if is_factory(model) and where.endswith(".py") else model


# One vocabulary for a run's settings in legends, status lines and tables: the model as it is called
# (gpt-tiny), b and k, the precision whenever amp is on (fp16), the processes as N, sharding with its sync
# (fsdp/last, reshard off; ddp beside an fsdp run), activation checkpointing when on (ckpt/full, ckpt/selective/2),
# any other setting as field=value (clear_cache=step). A label names a setting only where it applies to its run
# (gaccum_core.config.applies): no GradScaler scale without fp16, no sharding for one process, no text settings
# for images.
_ALWAYS = fields_with("in_label", "always")
# Named whenever not the default (in_label usual), in RunConfig's order but the precision first (b=8 k=4 fp16
# reduction=sum), and the processes by their count in the whole job (N: nproc, and nnodes with it).
_USUAL = tuple(sorted(("world_size" if name == "nproc" else name for name in fields_with("in_label", "usual")),
                      key=lambda name: name != "amp"))
# The data sets whose data_dir is what they train on (not where a named data set is kept): it tells runs apart.
_DATA_IN_DATA_DIR = ("imagefolder", "tokens", "hf-dataset")
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
    if name == "weights_file":  # by the file's name: from w.safetensors, or untrained
        return f"from {Path(config.weights_file).name}" if config.weights_file else "untrained"
    return f"{short_word(name)}={getattr(config, name)}"


def _sharding_text(config: RunConfig) -> str:
    """ddp, or fsdp with when it reduce-scatters (fsdp/every, fsdp/last) and 'reshard off' when it keeps weights."""
    if config.sharding != "fsdp":
        return config.sharding
    reshard = " reshard off" if config.fsdp_reshard_after_backward == "off" else ""
    return f"fsdp/{config.fsdp_sync}{reshard}"


def _usual(config: RunConfig) -> list[str]:
    """The settings a label names whenever they are not the default (fp16 whenever amp is on)."""
    return [name for name in _USUAL if getattr(config, name) != getattr(_DEFAULT, name) and applies(config, name)]


def run_label(config: RunConfig, known: Collection[str] | None = None) -> str:
    """A short legend text naming what usually differs between compared runs: model, b, k, and the
    precision, reduction, cache clearing, compilation and processes when not the default. known: the settings
    an imported run's hparams named (known_settings), the only ones said; None for a run of gaccum's."""
    return " ".join(setting_text(name, config) for name in (*_ALWAYS, *_usual(config))
                    if known is None or name in known)


def _named(config: RunConfig, name: str) -> bool:
    """Whether a label may name this setting of this run: it applies to the run, and data_dir only where it
    holds what the run trains on (a named data set's data_dir is only where it is kept)."""
    return applies(config, name) and (name != "data_dir" or config.dataset in _DATA_IN_DATA_DIR)


def _differing(configs: Sequence[RunConfig], known: Sequence[Collection[str] | None]) -> list[str]:
    """The settings (RunConfig's order) in which the runs they apply to (and that know them) differ, but those a
    label names anyway (the usual ones are named where not the default: fp16 against nothing says amp=off)."""
    skip = set(by_field("in_label"))  # named anyway, said by another's words, or never
    fields = [f.name for f in dataclasses.fields(RunConfig) if f.name not in skip]
    return [name for name in fields if len({getattr(c, name) for c, sure in zip(configs, known)
                                            if _named(c, name) and (sure is None or name in sure)}) > 1]


def created_text(run_id: str) -> str:
    """When the run was created, from its id (UTC time, then a random part): "run of 14:03:05", in
    this machine's time zone; the id itself when it holds no time."""
    try:
        created = datetime.strptime(run_id[:15], "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return run_id
    return f"run of {created.astimezone():%H:%M:%S}"


def run_labels(configs: Sequence[RunConfig], names: Sequence[str] | None = None,
               run_ids: Sequence[str] | None = None,
               known: Sequence[Collection[str] | None] | None = None) -> list[str]:
    """One legend text per run: model, b and k, the usual settings (run_label), every other setting in
    which the runs it applies to differ (where it applies), then the run's name if it has one. Runs that still
    share a label are told apart by when they were created (from run_ids), never by the end of their id. known: per
    run, the settings an imported run's hparams named (known_settings; None for a run of gaccum's): such a run is
    said "imported" with those alone, its other settings (gaccum's defaults in its config) never."""
    known = list(known) if known is not None else [None] * len(configs)
    differing = _differing(configs, known)
    sharded = [c for c, sure in zip(configs, known) if applies(c, "sharding") and (sure is None or "sharding" in sure)]
    say_ddp = len({c.sharding for c in sharded}) > 1  # ddp, the default, is named beside an fsdp run
    labels = []
    for i, (config, sure) in enumerate(zip(configs, known)):
        ddp = ["ddp"] if say_ddp and config.sharding == "ddp" and applies(config, "sharding") and \
            (sure is None or "sharding" in sure) else []
        said = [setting_text(n, config) for n in differing if _named(config, n) and (sure is None or n in sure)]
        text = " ".join(part for part in ["imported" if sure is not None else "", run_label(config, sure), *ddp, *said]
                        if part)
        name = names[i] if names is not None else ""
        labels.append(f"{text} · {name}" if name else text)
    return _told_apart(labels, run_ids)


def _told_apart(labels: list[str], run_ids: Sequence[str] | None) -> list[str]:
    """labels with each repeated one followed by its run's creation time (and a count when even that repeats)."""
    if run_ids is None:
        return labels
    repeated = {label for label, count in Counter(labels).items() if count > 1}  # not list.count: 10,000 runs
    told = [f"{label} · {created_text(run_id)}" if label in repeated else label
            for label, run_id in zip(labels, run_ids)]
    still = {label for label, count in Counter(told).items() if count > 1}  # created in the same second
    seen: dict[str, int] = {}
    for i, label in enumerate(told):
        if label in still:
            seen[label] = seen.get(label, 0) + 1
            told[i] = f"{label} ({seen[label]})"
    return told


def settings_table(configs: dict[str, RunConfig], started: Mapping[str, str] | None = None,
                   known: Mapping[str, Collection[str] | None] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Every setting (rows) of each run (columns), then the weights each started from (RunData.weights) when given,
    and the settings in which the runs differ. known: an imported run's settings its hparams named (RunData.known),
    its other cells empty and differing from none."""
    table = pd.DataFrame({run_id: dataclasses.asdict(c) for run_id, c in configs.items()})
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

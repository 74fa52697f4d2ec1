"""Imported runs: another tool's TensorBoard event files (Lightning, the Hugging Face Trainer, a SummaryWriter loop)
stored as read-only runs of state `imported`, one per event folder, beside gaccum's own.

Its scalars become metrics.csv and eval.csv rows by tag (gaccum_core.tensorboard.foreign_names), each tag that names no
column of gaccum's kept whole in imported.csv (tag, step, wall_time, value); its hparams become settings where they
name gaccum's (the rest gaccum's defaults), every other one kept in imported.json with where the run came from. The
run's folder is written under a temporary name and renamed into place: a listing sees all of it or nothing.
"""

from __future__ import annotations

import bisect
import csv
import dataclasses
import json
import os
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from gaccum_core.config import IMPORTED_KEY, ConfigError, RunConfig
from gaccum_core.words import plural
from gaccum_core.tensorboard.event_files import EventFilesError, EventFolder, Point, read_event_folders, text_settings
from gaccum_core.runs.files import RunWriter
from gaccum_core.tensorboard.foreign_names import EVALS, METRICS, Column, named_settings, tag_columns
from gaccum_core.runs.labels import setting_text
from gaccum_core.runs.store import IMPORTED_SETTINGS, RunStore, StoreError, now_iso
from gaccum_core.tensorboard.out import RUN_ID, one_process_row
from gaccum_core.states import RunState
from gaccum_core.train.metrics import COUNT_COLUMNS

IMPORTED_CSV = "imported.csv"  # the tags that name no column of gaccum's: tag, step, wall_time, value
IMPORTED_JSON = "imported.json"  # where the run came from, its other hparams and texts, which tag went where
_SAID = 8  # settings a run's message names, at most
# Why an imported run never trains here: said by resume, the command line and the pages.
NOT_RESUMABLE = ("was imported from TensorBoard event files: it is read-only and cannot be resumed or started "
                 "(no checkpoint; its settings are only those its hparams named)")


@dataclass(frozen=True)
class ImportedRun:
    """One run imported: its id, the folder it came from and what was found there."""

    run_id: str
    source: Path
    steps: int
    evals: int
    kept_tags: int
    settings: dict[str, Any]

    def summary(self) -> str:
        """What was imported, in one line (the run's message)."""
        config = RunConfig(**self.settings)  # the settings _config took: they fit one another
        named = list(dict.fromkeys(setting_text(name, config) for name in self.settings))  # labels' words: b=8, fp16
        if len(self.settings) == len(dataclasses.fields(RunConfig)):  # a gaccum run exported and imported again
            settings = "every setting from its hparams"
        elif named:
            more = f" and {len(named) - _SAID} more" if len(named) > _SAID else ""
            settings = f"settings from its hparams: {' '.join(named[:_SAID])}{more} (the rest gaccum's defaults)"
        else:
            settings = "no hparams name gaccum's settings (all gaccum's defaults)"
        kept = f"; {plural(self.kept_tags, 'other tag')} in {IMPORTED_CSV}" if self.kept_tags else ""
        return (f"imported from {self.source}: {plural(self.steps, 'step')}, {plural(self.evals, 'evaluation')}; "
                f"{settings}{kept}")


def import_runs(store: RunStore, root: str | Path) -> tuple[list[ImportedRun], list[str]]:
    """Each event folder under root stored as an imported run, and a line for each folder left out (no scalars,
    already imported). EventFilesError in one line when root is no directory or none of its folders imports."""
    root = Path(root).expanduser().resolve()
    folders = read_event_folders(root)
    imported, left_out = [], []
    for folder in folders:
        name = _run_name(root, folder.path)
        if not folder.scalars:
            left_out.append(f"{folder.path}: no scalars, not imported")
            continue
        earlier = _imported_before(store, name, folder.path)
        if earlier:
            left_out.append(f"{folder.path}: already imported as {earlier} (delete that run to import it again)")
            continue
        imported.append(_store_run(store, folder, name))
    if not imported and left_out:
        raise EventFilesError("; ".join(left_out))
    return imported, left_out


def _run_name(root: Path, folder: Path) -> str:
    """The folder's name, under the directory imported when that holds several (lightning_logs/version_0)."""
    top = root.name or "tensorboard"  # the root of the file system has no name
    name = top if folder == root else f"{top}/{folder.relative_to(root).as_posix()}"
    return name[-80:]


def _imported_before(store: RunStore, name: str, source: Path) -> str | None:
    """The run already imported from source, if any (only the runs whose id carries the name's slug are read)."""
    parts = store.new_run_id(name).split("-", 3)  # YYYYMMDD-HHMMSS-<random>-<the name's slug, if any>
    slug = parts[3] if len(parts) == 4 else ""
    for run_id in store.list_runs():
        if not run_id.endswith(slug):
            continue
        try:
            data = json.loads((store.path(run_id) / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get(IMPORTED_KEY) == str(source):
            return run_id
    return None


def _store_run(store: RunStore, folder: EventFolder, name: str) -> ImportedRun:
    """Store one event folder as an imported run: its ImportedRun."""
    columns = tag_columns(folder.scalars)
    start = min(p.wall_time for points in folder.scalars.values() for p in points)
    steps = _rows(folder, columns, METRICS, start)
    evals = _rows(folder, columns, EVALS, start, _epochs(folder, columns))
    kept = [tag for tag in sorted(folder.scalars) if tag not in columns]
    hparams = {**text_settings(folder.texts), **folder.hparams}  # the plugin's hparams over the Trainer's args
    config, settings, refused = _config(hparams)
    if RUN_ID in hparams and config.world_size == 1:  # gaccum's own one-process run: its comm/ columns unwritten
        steps = [one_process_row(row) for row in steps]
    run_id = store.new_run_id(name)
    run = ImportedRun(run_id, folder.path, len(steps), len(evals), len(kept), {k: v for k, (v, _) in settings.items()})
    used = {hparam for _, hparam in settings.values()}
    documents = {
        "config.json": {**config.to_dict(), IMPORTED_KEY: str(folder.path)},
        IMPORTED_JSON: {
            "from": str(folder.path), "event_files": folder.files, "imported": now_iso(),
            "settings": {k: {"value": v, "from": hparam} for k, (v, hparam) in settings.items()},
            "refused": refused, "hparams": {k: v for k, v in hparams.items() if k not in used},
            "texts": {tag: text[:20000] for tag, text in folder.texts.items()},
            "tags": {tag: f"{table}.csv {column}" for tag, (table, column) in columns.items()}
            | {tag: IMPORTED_CSV for tag in kept}},
        "status.json": {
            "run_id": run_id, "name": name, "state": RunState.IMPORTED, "message": run.summary(),
            "created": now_iso(), "started": _iso(start), "ended": _iso(_last_time(folder)), "device": "",
            IMPORTED_SETTINGS: list(settings)},  # what labels and tables show of its config: the rest are defaults
    }
    kept_rows = [(tag, p.step, p.wall_time, str(np.float32(p.value))) for tag in kept for p in folder.scalars[tag]]
    _write_run(store, run_id, steps, evals, kept_rows, documents)
    return run


def _write_run(store: RunStore, run_id: str, steps: list[dict[str, Any]], evals: list[dict[str, Any]],
               kept_rows: list[tuple], documents: dict[str, dict[str, Any]]) -> None:
    """The run's files written in a temporary folder of the runs directory, renamed into place once all are."""
    _ensure_root(store)
    temporary = store.root / f".{run_id}.importing"  # a dot first: no listing takes it for a run
    try:
        temporary.mkdir()
        writer = RunWriter(temporary)
        for row in steps:
            writer.log_step(row)
        for row in evals:
            writer.log_eval(row)
        writer.close()
        with open(temporary / IMPORTED_CSV, "w", encoding="utf-8", newline="") as file:
            kept = csv.writer(file, lineterminator="\n")
            kept.writerow(("tag", "step", "wall_time", "value"))
            kept.writerows(kept_rows)
        for file_name, data in documents.items():
            (temporary / file_name).write_text(json.dumps(data, indent=2, default=str, sort_keys=True) + "\n",
                                               encoding="utf-8")
        os.rename(temporary, store.path(run_id))
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def _ensure_root(store: RunStore) -> None:
    try:
        store.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"runs directory {store.root.resolve()} cannot be created: {exc.strerror}") from None


def _config(hparams: dict[str, Any]) -> tuple[RunConfig, dict[str, tuple[Any, str]], dict[str, str]]:
    """The settings the hparams name over gaccum's defaults: the config, each setting taken (value, hparam), and
    each hparam refused with the reason (a value gaccum does not allow, or one that does not fit the others)."""
    values, sources = named_settings(hparams)
    refused: dict[str, str] = {}
    while True:
        try:
            config = RunConfig(**values)
            break
        except ConfigError as exc:
            # The refusal names a setting given, or one of the defaults that does not fit them: the last given.
            field = exc.field if exc.field in values else list(values)[-1]
            refused[sources[field]] = str(ConfigError(field, values.pop(field), exc.allowed))
    return config, {k: (v, sources[k]) for k, v in values.items()}, refused


def _epochs(folder: EventFolder, columns: dict[str, Column]) -> list[Point]:
    """The run's epoch points, by step (for the evaluations' epoch)."""
    tag = next((t for t, column in columns.items() if column == (METRICS, "epoch")), None)
    return sorted(folder.scalars[tag], key=lambda p: p.step) if tag else []


def _rows(folder: EventFolder, columns: dict[str, Column], table: str, start: float,
          epochs: list[Point] | None = None) -> list[dict[str, Any]]:
    """The table's rows: one per step at which a tag of its columns was logged (the epoch alone makes none), each
    value as logged (the last at a step), the epoch the last logged by then, the wall time since the first event."""
    by_column = {column: {p.step: p for p in folder.scalars[tag]} for tag, (t, column) in columns.items() if t == table}
    steps = sorted({step for column, points in by_column.items() if column != "epoch" for step in points})
    epochs = epochs if epochs is not None else sorted(by_column.get("epoch", {}).values(), key=lambda p: p.step)
    epoch_steps = [p.step for p in epochs]
    rows = []
    for step in steps:
        points = {column: found[step] for column, found in by_column.items() if step in found}
        row: dict[str, Any] = {"step": step, **{column: _cell(column, p.value) for column, p in points.items()}}
        at = bisect.bisect_right(epoch_steps, step)
        if "epoch" not in row and at:
            row["epoch"] = _cell("epoch", epochs[at - 1].value)
        row.setdefault("wall_time_s", round(min(p.wall_time for p in points.values()) - start, 3))
        rows.append(row)
    return rows


def _cell(column: str, value: float) -> int | str | None:
    """A logged value as metrics.csv holds it: a count as an integer (a Trainer's fractional epoch 1.25 as 1),
    any other figure as the shortest text of its float32."""
    if column in COUNT_COLUMNS:
        return int(value // 1) if np.isfinite(value) else None
    return str(np.float32(value))


def _last_time(folder: EventFolder) -> float:
    return max(p.wall_time for points in folder.scalars.values() for p in points)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds")

"""A run's TensorBoard event files: its rows as scalars, its settings as hparams, written as it trains.

runs/<id>/tb/ (config.tensorboard on; global rank 0 alone) holds every metrics.csv and eval.csv column under the
tag of its group (TAGS, the one mapping: train/loss, memory/train_mem_mb, comm/reduce_scatter_calls,
eval/test_accuracy, …) against the optimizer step (comm/ only where several processes communicate), and in the same file the run's id, name and settings as hparams
with the final figures (FINAL_TAGS) as their metrics. torch's hparams() makes those summaries; they are written
here, not by SummaryWriter.add_hparams, which puts them in a run folder of their own (pytorch #32651).

A row's events are appended in one write(), as metrics.csv's rows are (files.append_whole): a kill leaves whole
events. A resumed run writes a new file after its older ones were cut back to the checkpoint (truncate_events),
so each step is in them once. A failure to write stops the writing, never the run: EventSink says it once.
"""

from __future__ import annotations

import io
import itertools
import math
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from gaccum_core.config import CHOICES, RunConfig
from gaccum_core.words import first_line
from gaccum_core.runs.files import append_whole, replace_atomically
from gaccum_core.states import RunState
from gaccum_core.train.metrics import COLLECTIVE_COLUMNS, EVAL_COLUMNS, STEP_COLUMNS, TRAINING_MEMORY_COLUMNS, Row

if TYPE_CHECKING:  # tensorboard on use: the run store imports this module, and a listing needs no protobuf
    from tensorboard.compat.proto.event_pb2 import Event

EVENT_FILES = "events.out.tfevents.*"  # what TensorBoard reads in a folder
TABLES = {"metrics": STEP_COLUMNS, "eval": EVAL_COLUMNS}
# The comm/ columns, as a run in one process has them: one rank, no collectives (written only by runs of several).
ONE_PROCESS = {"world_size": 1, **dict.fromkeys(COLLECTIVE_COLUMNS, 0)}
# A metrics.csv column's group; every other one is train/ (loss, lr, scale, skipped_total, samples…).
_GROUPS = {
    **dict.fromkeys(("mem_allocated_mb", "mem_reserved_mb", "mem_peak_mb", "activation_mb", *TRAINING_MEMORY_COLUMNS,
                     "grad_kept_mb"), "memory"),
    **dict.fromkeys(ONE_PROCESS, "comm"),
    **dict.fromkeys(("step_time_s", "samples_per_s", "tokens_per_s", "cache_clear_s", "wall_time_s"), "speed"),
}


def tag_of(column: str, table: str = "metrics") -> str:
    """The tag of a metrics.csv column (train/loss, memory/train_mem_mb, comm/…, speed/…) or, for table "eval",
    of an eval.csv one (eval/test_accuracy)."""
    return f"eval/{column}" if table == "eval" else f"{_GROUPS.get(column, 'train')}/{column}"


# (table, column) → tag for every column but step, the axis; import reads event files back through its inverse.
TAGS = {(table, column): tag_of(column, table) for table, columns in TABLES.items() for column in columns
        if column != "step"}
_COLUMNS = {tag: key for key, tag in TAGS.items()}
SAMPLE_TAG = "eval/sample"  # a language run's generated text at each evaluation (samples.jsonl), as text
FINAL_TAGS = ("final/loss", "final/test_loss", "final/test_accuracy", "final/perplexity", "final/skipped_total",
              "final/wall_time_s", "final/mem_peak_mb")
RUN_ID, NAME = "run_id", "name"  # the hparams beside the settings
_uid = itertools.count()


def column_of(tag: str) -> tuple[str, str] | None:
    """(table, column) of a tag of TAGS; None for any other (final/loss, another tool's loss)."""
    return _COLUMNS.get(tag)


def final_figures(steps: Sequence[Row], evals: Sequence[Row]) -> dict[str, float]:
    """The run's figures by FINAL_TAGS' tag: its last epoch's loss with each step weighted by its samples (as the
    runs table and a sweep count it), its last evaluation's, skipped steps, time, the device's peak memory; a figure
    the run lacks is left out."""
    last, evaluated = (steps[-1] if steps else {}), (evals[-1] if evals else {})
    # Rows with their samples and loss only (an imported run's may lack them: no final loss then).
    epoch = [row for row in steps if row.get("epoch") == last.get("epoch") and row.get("samples") is not None
             and row.get("loss") is not None]
    samples = sum(row["samples"] for row in epoch)
    figures = {
        "final/loss": sum(row["loss"] * row["samples"] for row in epoch) / samples if samples else None,
        "final/test_loss": evaluated.get("test_loss"), "final/test_accuracy": evaluated.get("test_accuracy"),
        "final/perplexity": evaluated.get("perplexity"), "final/skipped_total": last.get("skipped_total"),
        "final/wall_time_s": last.get("wall_time_s"),
        "final/mem_peak_mb": max((row["mem_peak_mb"] for row in steps if row.get("mem_peak_mb") is not None),
                                 default=None),
    }
    return {tag: float(value) for tag, value in figures.items() if value is not None and math.isfinite(value)}


def _event(step: int, summary: Any, wall_time: float | None = None) -> Event:
    from tensorboard.compat.proto.event_pb2 import Event

    return Event(wall_time=time.time() if wall_time is None else wall_time, step=step, summary=summary)


def step_events(row: Row, table: str, wall_time: float | None = None) -> list[Event]:
    """One row's events ("metrics" or "eval"): its columns' values as scalars at its step (empty cells left out),
    and a language run's generated sample as text."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    quiet = table == "metrics" and not communicates(row)
    values = [Summary.Value(tag=tag_of(column, table), simple_value=float(row[column]))
              for column in TABLES[table] if column != "step" and row.get(column) is not None
              and not (quiet and column in ONE_PROCESS)]
    events = [_event(row["step"], Summary(value=values), wall_time)] if values else []
    if row.get("sample") is not None:
        from torch.utils.tensorboard.summary import text

        events.append(_event(row["step"], text(SAMPLE_TAG, row["sample"]), wall_time))
    return events


def communicates(row: Row) -> bool:
    """Whether the step's processes talked (more than one): a single process's comm/ scalars, always ONE_PROCESS's
    values, are not written, and the first group TensorBoard opens on is not seven flat lines."""
    return (row.get("world_size") or 1) > 1


def one_process_row(row: Row) -> Row:
    """A row read back from the event files of a one-process gaccum run, with the comm/ columns it did not write."""
    return {**ONE_PROCESS, **row}


def settings_events(config: RunConfig, run_id: str, name: str, step: int) -> list[Event]:
    """The hparams experiment (the settings' names, each choice's values, FINAL_TAGS as its metrics) and the
    session's start (the run's id, name and settings), torch's hparams() summaries."""
    from torch.utils.tensorboard.summary import hparams

    values = {RUN_ID: run_id, NAME: name, **config.to_dict()}
    experiment, start, _ = hparams(values, dict.fromkeys(FINAL_TAGS, math.nan),
                                   {field: list(choices) for field, choices in CHOICES.items()})
    return [_event(step, experiment), _event(step, start)]


def end_events(figures: dict[str, float], step: int, finished: bool) -> list[Event]:
    """The final figures as scalars at the last step; for a finished run, the session's end (success)."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    from torch.utils.tensorboard.summary import hparams

    events = [_event(step, Summary(value=[Summary.Value(tag=tag, simple_value=value)
                                          for tag, value in figures.items()]))] if figures else []
    return events + ([_event(step, hparams({}, {})[2])] if finished else [])


class EventWriter:
    """A new event file in a folder (made if need be), each append() of events one write(), as CSV rows are."""

    def __init__(self, directory: Path) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        directory.mkdir(parents=True, exist_ok=True)
        # TensorBoard reads a folder's files in name order: the time first, as its own writer names them.
        self.path = directory / f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}" \
                                f".{next(_uid)}"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        self.append([Event(wall_time=time.time(), file_version="brain.Event:2")])

    def append(self, events: Sequence[Event]) -> None:
        """Write the events, all or none of them (OSError naming a full disk as the run store does)."""
        append_whole(self._fd, _records(events), self.path.name, self.path.parent)

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


def _records(events: Sequence[Event]) -> bytes:
    """The events as TFRecords, the event file's framing (tensorboard's own RecordWriter)."""
    from tensorboard.summary.writer.record_writer import RecordWriter

    buffer = io.BytesIO()
    writer = RecordWriter(buffer)
    for event in events:
        writer.write(event.SerializeToString())
    return buffer.getvalue()


class EventSink:
    """A MetricSink writing a run's rows into its event files as they come, after its settings; the first failure to
    write stops it, said once through on_problem (and kept in `problem`) while training goes on."""

    def __init__(self, directory: Path, config: RunConfig, run_id: str, name: str, from_step: int = 0,
                 on_problem: Callable[[str], None] = lambda words: None) -> None:
        self.problem, self._step, self._on_problem = "", from_step, on_problem
        self._writer: EventWriter | None = None
        try:
            self._writer = EventWriter(directory)
        except Exception as exc:  # noqa: BLE001 - whatever stops the event files, the run goes on
            self._fail(exc)
        self._append(lambda: _purge(from_step) + settings_events(config, run_id, name, from_step))

    def log_step(self, row: Row) -> None:
        """Write an optimizer step's scalars."""
        self._step = row["step"]
        self._append(lambda: step_events(row, "metrics"))

    def log_eval(self, row: Row) -> None:
        """Write an evaluation's scalars (and sample)."""
        self._append(lambda: step_events(row, "eval"))

    @property
    def writing(self) -> bool:
        """Whether the event files are still written (no failure yet)."""
        return self._writer is not None

    def finish(self, state: RunState, figures: dict[str, float]) -> None:
        """Write the final figures at the last step, and the session's end for a finished run."""
        self._append(lambda: end_events(figures, self._step, state == RunState.FINISHED))

    def close(self) -> None:
        """Close the event file."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _append(self, events: Callable[[], list[Event]]) -> None:
        if self._writer is None:
            return
        try:
            self._writer.append(events())
        except Exception as exc:  # noqa: BLE001 - as in __init__
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        self.problem = (f"TensorBoard event files are not written from step {self._step + 1} on (training went on): "
                        f"{first_line(exc)}")
        try:
            self.close()
            self._on_problem(self.problem)
        except Exception:  # noqa: BLE001 - saying it must not stop the run either
            pass


def _purge(from_step: int) -> list[Event]:
    """For a resumed run, the restart marker that has a TensorBoard already reading the run forget the steps after
    the checkpoint it had read (a kill's leftovers), as SummaryWriter's purge_step writes it."""
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog

    return [Event(wall_time=time.time(), step=from_step + 1, session_log=SessionLog(status=SessionLog.START))] \
        if from_step else []


def truncate_events(directory: Path, last_step: int, last_eval_step: int) -> None:
    """Cut a run's event files back to its checkpoint, as its CSV rows are: scalars after last_step (eval/ ones after
    last_eval_step), its settings and final figures (the resumed run writes them again) and restart markers are
    dropped; a file is rewritten atomically only when something is. Nothing without such a folder."""
    if not directory.is_dir():
        return
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto.event_pb2 import Event

    for path in sorted(directory.glob(EVENT_FILES)):
        # Raw: the loader that parses events migrates scalars to tensors, which the rewritten file would then hold.
        events = [Event.FromString(record) for record in RawEventFileLoader(str(path)).Load()]
        kept = [event for event in (_cut(event, last_step, last_eval_step) for event in events) if event is not None]
        if [e.SerializeToString() for e in kept] != [e.SerializeToString() for e in events]:
            replace_atomically(path, lambda file, kept=kept: file.write(_records(kept)))


def _cut(event: Event, last_step: int, last_eval_step: int) -> Event | None:
    """The event with only what a run resumed at last_step keeps; None when nothing is left."""
    if event.HasField("session_log"):
        return None
    if not event.HasField("summary"):
        return event
    kept = [value for value in event.summary.value if not value.tag.startswith(("final/", "_hparams_/"))
            and event.step <= (last_eval_step if value.tag.startswith("eval/") else last_step)]
    if not kept:
        return None
    cut = type(event)()
    cut.CopyFrom(event)
    del cut.summary.value[:]
    cut.summary.value.extend(kept)
    return cut


def write_run_events(directory: Path, config: RunConfig, status: dict[str, Any], steps: Sequence[Row],
                     evals: Sequence[Row]) -> Path:
    """Event files for a run recorded before, as it would have written them as it trained (each event at the time
    its row was, from its start and wall_time_s): one new file in directory, replacing the ones an earlier export
    left there; its path. OSError when it cannot be written."""
    started = _epoch_seconds(status.get("started") or status.get("created"))
    at = (lambda row: None) if started is None else (lambda row: started + (row.get("wall_time_s") or 0.0))
    writer = EventWriter(directory)
    try:
        writer.append(settings_events(config, status.get("run_id", directory.name), status.get("name", ""), 0))
        for table, rows in (("metrics", steps), ("eval", evals)):
            for row in rows:
                writer.append(step_events(row, table, at(row)))
        last = steps[-1]["step"] if steps else 0
        writer.append(end_events(final_figures(steps, evals), last, status.get("state") == RunState.FINISHED))
    except BaseException:
        writer.close()
        writer.path.unlink(missing_ok=True)
        raise
    writer.close()
    for earlier in directory.glob(EVENT_FILES):
        if earlier != writer.path:
            earlier.unlink()
    return writer.path


def _epoch_seconds(iso: object) -> float | None:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(iso)).timestamp()
    except ValueError:
        return None

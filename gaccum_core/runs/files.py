"""How a run's files are written and read while another process may be reading or writing them.

Whole files (JSON, checkpoints, the model, a rewritten CSV) are replaced atomically: a reader, or a
kill at any moment, sees the old file or the new one. CSV rows are appended one whole line per
write and flushed, so a reader in another process never sees a half-written row; a follower reads
only the complete lines appended since its last read.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any, Callable

from gaccum_core.train.metrics import EVAL_COLUMNS, STEP_COLUMNS, Row, parse_row

METRICS_FILE = "metrics.csv"
EVALS_FILE = "eval.csv"
SAMPLES_FILE = "samples.jsonl"


TEMPORARY_GLOB = ".*.tmp"  # what replace_atomically names its temporary files: a kill can leave one
FULL_BELOW = 1024 * 1024  # free bytes under which a failed write is put down to a full disk


class DiskFullError(OSError):
    """ENOSPC, in words that name the directory whose device is full."""

    def __str__(self) -> str:
        return str(self.strerror)


def run_error_words(run_dir: Path, exc: Exception) -> str:
    """Why an action on a run (resume) was refused, in words naming the file: for an OSError, no such run, a
    read-only file system or a write refused (its files cannot be written, not 'cannot be read'), or a file
    that cannot be read; any other refusal's own message."""
    if not isinstance(exc, OSError):
        return str(exc)
    run_id = run_dir.name
    if not run_dir.is_dir():
        return f"no such run (no directory {run_dir})"
    name = Path(exc.filename).name if exc.filename else "a file"
    if exc.errno == errno.EROFS:
        return (f"run {run_id} is on a read-only file system ({run_dir.parent}): {name} cannot be written; "
                "nothing was changed")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"{name} of run {run_id} cannot be opened ({exc.strerror}): check its permissions; nothing was changed"
    return f"{name} of run {run_id} cannot be read ({exc.strerror or type(exc).__name__}); its other files are untouched"


def disk_full(directory: Path, at: str) -> DiskFullError:
    """The error a write into a full disk raises here, whatever the writer raised (torch.save's C++
    writer reports 'unexpected pos'); it advises resuming only a run that has a checkpoint to resume from."""
    if (directory / "checkpoint.pt").exists():
        then = "then resume the run from its checkpoint"
    elif (directory / "status.json").exists():  # a run directory
        then = "then start the run again (it has no checkpoint to resume from)"
    else:
        then = "then try again"
    return DiskFullError(errno.ENOSPC, f"no space left on the device holding {directory.resolve()} (writing {at}): "
                                       f"free some space there, {then}", str(directory))


def _is_full(directory: Path, exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    try:
        return shutil.disk_usage(directory).free < FULL_BELOW
    except OSError:
        return False


def replace_atomically(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """write() into a temporary file beside path, flush, fsync, rename over path: a kill at any moment
    leaves the old file or the new one, and at worst a stray .tmp that nothing reads (and the next
    start removes). A full disk raises disk_full()'s OSError."""
    fd, tmp = -1, ""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, Exception) and _is_full(path.parent, exc):
            raise disk_full(path.parent, path.name) from exc
        raise


def write_text_atomically(path: Path, text: str) -> None:
    """Replace path's content with text (UTF-8), atomically."""
    replace_atomically(path, lambda f: f.write(text.encode("utf-8")))


def write_small_file(path: Path, text: str) -> None:
    """Replace a small file's content (status.json): atomically, or, when the disk is full, over the old
    bytes in place, which needs no new block while the text fits the file's last one; a run that
    failed for want of space still ends `failed` on disk."""
    try:
        write_text_atomically(path, text)
    except OSError as exc:
        data = text.encode("utf-8")
        if exc.errno != errno.ENOSPC or not path.exists() or len(data) > max(path.stat().st_size, 4096):
            raise
        fd = os.open(path, os.O_WRONLY)
        try:
            written = os.pwrite(fd, data, 0)
            os.ftruncate(fd, written)
        finally:
            os.close(fd)
        if written != len(data):
            raise exc


def append_line(fd: int, line: str, name: str, directory: Path) -> None:
    """Append one whole line to an open file (O_APPEND), or nothing: a write the disk cuts short is
    taken back, so readers never see half a row."""
    append_whole(fd, line.encode("utf-8"), name, directory)


def append_whole(fd: int, data: bytes, name: str, directory: Path) -> None:
    """Append bytes (a CSV row, a TensorBoard event's records) to an open file (O_APPEND) in one write(), or
    nothing: a write the disk cuts short is taken back."""
    end = os.lseek(fd, 0, os.SEEK_END)
    try:
        written = os.write(fd, data)  # one write(): another process reads all of it or none
        if written != len(data):
            raise OSError(errno.ENOSPC, f"short write: {written} of {len(data)} bytes")
    except OSError as exc:
        os.ftruncate(fd, end)
        raise (disk_full(directory, name) if _is_full(directory, exc) else exc) from exc


def remove_temporaries(run_dir: Path) -> list[str]:
    """Delete the temporary files kills and errors left in a run directory (call it only while this
    process owns the run: nobody else is writing); their names."""
    removed = []
    for stray in run_dir.glob(TEMPORARY_GLOB):
        stray.unlink(missing_ok=True)
        removed.append(stray.name)
    return removed


def truncate_csv(path: Path, last_step: int) -> None:
    """Drop the rows of a CSV file whose step is after last_step, and a last line a kill cut short
    (rewritten atomically; left as it is when nothing is dropped)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    step_at = next(csv.reader([lines[0]])).index("step") if lines else 0
    kept = lines[:1] + [line for line in lines[1:]
                        if line.endswith("\n") and int(next(csv.reader([line]))[step_at]) <= last_step]
    if len(kept) != len(lines):
        write_text_atomically(path, "".join(kept))


def _csv_line(values: list[Any]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(["" if v is None else v for v in values])
    return buffer.getvalue()


class CsvAppender:
    """Appends whole rows to a CSV file, each in one write() that live readers see at once."""

    def __init__(self, path: Path, columns: tuple[str, ...]) -> None:
        self.path, self.columns = path, columns
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if os.fstat(self._fd).st_size == 0:
            self._append(list(columns))
        else:  # a run written before columns were added (resumed now) keeps its header: rows match it
            with open(path, encoding="utf-8", newline="") as file:
                self.columns = tuple(next(csv.reader(file), columns))

    def _append(self, values: list[Any]) -> None:
        append_line(self._fd, _csv_line(values), self.path.name, self.path.parent)

    def append(self, row: Row) -> None:
        """Write one row (missing keys are empty cells)."""
        self._append([row.get(c) for c in self.columns])

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


class CsvFollower:
    """Reads the whole rows appended to a CSV file since the last call, as typed rows."""

    def __init__(self, path: Path) -> None:
        self.path, self._offset, self._columns = path, 0, None

    def read(self) -> list[Row]:
        """New complete rows (a line still being written waits for the next call)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        records = list(csv.reader(io.StringIO(complete.decode("utf-8"))))
        if records and self._columns is None:
            self._columns = tuple(records.pop(0))
        return [parse_row(self._columns, values) for values in records]


class RunWriter:
    """A MetricSink that appends to a run's metrics.csv and eval.csv."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.metrics = CsvAppender(run_dir / METRICS_FILE, STEP_COLUMNS)
        self.evals = CsvAppender(run_dir / EVALS_FILE, EVAL_COLUMNS)

    def log_step(self, row: Row) -> None:
        """Append an optimizer step's row."""
        self.metrics.append(row)

    def log_eval(self, row: Row) -> None:
        """Append an evaluation's row; a language run's generated sample goes to samples.jsonl, one
        whole line per evaluation."""
        self.evals.append(row)
        if row.get("sample") is not None:
            fd = os.open(self.run_dir / SAMPLES_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                append_line(fd, json.dumps({"step": row["step"], "text": row["sample"]}) + "\n", SAMPLES_FILE,
                            self.run_dir)
            finally:
                os.close(fd)

    def close(self) -> None:
        """Close both files."""
        self.metrics.close()
        self.evals.close()

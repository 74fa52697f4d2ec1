"""How a run's files are written and read while another process may be reading or writing them.

Whole files (JSON, checkpoints, the model, a rewritten CSV) are replaced atomically: a reader, or a
kill at any moment, sees the old file or the new one. CSV rows are appended one whole line per
write and flushed, so a reader in another process never sees a half-written row; a follower reads
only the complete lines appended since its last read.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Callable

from gaccum_core.train.metrics import EVAL_COLUMNS, STEP_COLUMNS, Row, parse_row

METRICS_FILE = "metrics.csv"
EVALS_FILE = "eval.csv"
SAMPLES_FILE = "samples.jsonl"


def replace_atomically(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """write() into a temporary file beside path, flush, fsync, rename over path: a kill at any moment
    leaves the old file or the new one, and at worst a stray .tmp that nothing reads."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomically(path: Path, text: str) -> None:
    """Replace path's content with text (UTF-8), atomically."""
    replace_atomically(path, lambda f: f.write(text.encode("utf-8")))


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
    """Appends whole rows to a CSV file, flushing each one for live readers."""

    def __init__(self, path: Path, columns: tuple[str, ...]) -> None:
        self.columns = columns
        new = not path.exists() or path.stat().st_size == 0
        self._file = open(path, "a", encoding="utf-8", newline="")
        if new:
            self._append(list(columns))

    def _append(self, values: list[Any]) -> None:
        # One write() of one whole line, then flush: the line reaches the file in one piece.
        self._file.write(_csv_line(values))
        self._file.flush()

    def append(self, row: Row) -> None:
        """Write one row (missing keys are empty cells)."""
        self._append([row.get(c) for c in self.columns])

    def close(self) -> None:
        """Close the file."""
        self._file.close()


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
            with open(self.run_dir / SAMPLES_FILE, "a", encoding="utf-8") as file:
                file.write(json.dumps({"step": row["step"], "text": row["sample"]}) + "\n")

    def close(self) -> None:
        """Close both files."""
        self.metrics.close()
        self.evals.close()

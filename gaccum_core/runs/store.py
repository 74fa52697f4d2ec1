"""The run store: one directory per run, the only module that reads or writes a run's files.

runs/<run_id>/ holds config.json, status.json, metrics.csv, eval.csv, at the end model.pt, and
traceback.txt when a run failed; a run in a worker process also gets `stop` when asked to stop, and
a data-parallel run torchrun/ (torchrun's per-rank error files).
JSON files are replaced atomically; CSV rows are appended one whole line per write and flushed,
so a reader in another process never sees a half-written row.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import secrets
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Callable

import pandas as pd
import torch

from gaccum_core.config import RunConfig
from gaccum_core.train.metrics import ADDED_COLUMNS, ADDED_EVAL_COLUMNS, EVAL_COLUMNS, STEP_COLUMNS, Row, parse_row
from gaccum_core.states import RunState

_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_SLUG_RE = re.compile(r"[^A-Za-z0-9_-]+")


SAMPLES_FILE = "samples.jsonl"


class StoreError(ValueError):
    """A run id or the runs directory is not usable; the message says why."""


def validate_run_id(run_id: str) -> str:
    """Return run_id if it is a plain directory name (no separators, no '..'), else raise StoreError."""
    if not isinstance(run_id, str) or not _RUN_ID_RE.match(run_id) or ".." in run_id:
        raise StoreError(f"run id {run_id!r} is not allowed: letters, digits, '_', '-', '.' only, no '..' or '/'")
    return run_id


def now_iso() -> str:
    """The current UTC time as ISO 8601."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _replace_atomically(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
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


def _write_atomic(path: Path, text: str) -> None:
    _replace_atomically(path, lambda f: f.write(text.encode("utf-8")))


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
        self.metrics = CsvAppender(run_dir / "metrics.csv", STEP_COLUMNS)
        self.evals = CsvAppender(run_dir / "eval.csv", EVAL_COLUMNS)

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


class RunStore:
    """The runs directory."""

    def __init__(self, root: str | Path = "runs") -> None:
        self.root = Path(root)

    def path(self, run_id: str) -> Path:
        """The directory of a run (the id is validated first)."""
        return self.root / validate_run_id(run_id)

    def new_run_id(self, name: str | None = None) -> str:
        """A fresh, sortable id: UTC time, a random suffix and the optional name."""
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        slug = _SLUG_RE.sub("-", name).strip("-")[:40] if name else ""
        return "-".join(p for p in (stamp, secrets.token_hex(3), slug) if p)

    def create(self, config: RunConfig, name: str | None = None, plan: dict[str, Any] | None = None) -> str:
        """Make the run directory with config.json, status.json (queued), CSV headers and, for a run whose
        micro-batch the planner chose, plan.json."""
        self._ensure_writable_root()
        run_id = self.new_run_id(name)
        run_dir = self.path(run_id)
        try:
            run_dir.mkdir()
            _write_atomic(run_dir / "config.json", config.to_json() + "\n")
            self._write_status(run_dir, {"run_id": run_id, "name": name or "", "state": RunState.QUEUED,
                                         "message": "", "created": now_iso(),
                                         "torch_version": torch.__version__})
            RunWriter(run_dir).close()
            if plan is not None:
                _write_atomic(run_dir / "plan.json", json.dumps(plan, indent=2) + "\n")
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        return run_id

    def samples(self, run_id: str) -> list[dict[str, Any]]:
        """A language run's generated samples, one {"step", "text"} per evaluation, oldest first."""
        path = self.path(run_id) / SAMPLES_FILE
        if not path.exists():
            return []
        samples = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                samples.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line still being written (or cut by a kill): the next read has it whole
        return samples

    def read_plan(self, run_id: str) -> dict[str, Any] | None:
        """The plan that chose this run's micro-batch (plan.json), or None for a run set by hand."""
        path = self.path(run_id) / "plan.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    def _ensure_writable_root(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"runs directory {self.root.resolve()} is a file, not a directory: choose another path")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"runs directory {self.root.resolve()} cannot be created: {exc.strerror}") from None
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise StoreError(f"runs directory {self.root.resolve()} is not writable: choose another runs directory")

    def _write_status(self, run_dir: Path, status: dict[str, Any]) -> None:
        _write_atomic(run_dir / "status.json", json.dumps(status, indent=2) + "\n")

    def update_status(self, run_id: str, **fields: Any) -> dict[str, Any]:
        """Merge fields into status.json (atomically) and return the new status."""
        status = {**self.read_status(run_id), **fields}
        self._write_status(self.path(run_id), status)
        return status

    def read_status(self, run_id: str) -> dict[str, Any]:
        """status.json as a dict."""
        return json.loads((self.path(run_id) / "status.json").read_text(encoding="utf-8"))

    def read_config(self, run_id: str) -> RunConfig:
        """config.json as a validated RunConfig."""
        return RunConfig.load(self.path(run_id) / "config.json")

    def writer(self, run_id: str) -> RunWriter:
        """A sink appending to this run's CSV files."""
        return RunWriter(self.path(run_id))

    def read_metrics(self, run_id: str) -> pd.DataFrame:
        """metrics.csv as a DataFrame (one row per optimizer step); a run written before a column was
        added reads with that column's value for such runs."""
        frame = pd.read_csv(self.path(run_id) / "metrics.csv")
        return frame.assign(**{c: v for c, v in ADDED_COLUMNS.items() if c not in frame.columns})

    def metrics_csv(self, run_id: str) -> bytes:
        """metrics.csv as written, for a download."""
        return (self.path(run_id) / "metrics.csv").read_bytes()

    def evals_csv(self, run_id: str) -> bytes:
        """eval.csv as written, for a download."""
        return (self.path(run_id) / "eval.csv").read_bytes()

    def followers(self, run_id: str) -> tuple[CsvFollower, CsvFollower]:
        """Readers of the rows metrics.csv and eval.csv gain while another process writes them."""
        run_dir = self.path(run_id)
        return CsvFollower(run_dir / "metrics.csv"), CsvFollower(run_dir / "eval.csv")

    def stop_path(self, run_id: str) -> Path:
        """The file whose existence asks a worker process to stop the run."""
        return self.path(run_id) / "stop"

    def request_stop(self, run_id: str) -> None:
        """Ask the run's worker process to stop (it checks before every micro-batch)."""
        self.stop_path(run_id).touch()

    def clear_stop_request(self, run_id: str) -> None:
        """Forget an earlier stop request, so a resumed run's worker does not stop at once."""
        self.stop_path(run_id).unlink(missing_ok=True)

    def torchrun_log_dir(self, run_id: str) -> Path:
        """Where torchrun writes each rank's error.json for a data-parallel run."""
        return self.path(run_id) / "torchrun"

    def metric_rows(self, run_id: str) -> list[Row]:
        """metrics.csv's rows as typed dicts (what the run logged)."""
        return self.followers(run_id)[0].read()

    def eval_rows(self, run_id: str) -> list[Row]:
        """eval.csv's rows as typed dicts."""
        return self.followers(run_id)[1].read()

    def change_config(self, run_id: str, config: RunConfig, at_step: int) -> None:
        """Replace config.json (atomically) with a longer run's config, its history recording the change."""
        old = json.loads((self.path(run_id) / "config.json").read_text(encoding="utf-8"))
        history = old.pop("history", [])
        changes = {k: [old.get(k), v] for k, v in config.to_dict().items() if old.get(k) != v}
        history.append({"changed": now_iso(), "at_step": at_step, "fields": changes})
        _write_atomic(self.path(run_id) / "config.json", json.dumps({**config.to_dict(), "history": history},
                                                                    indent=2, sort_keys=True) + "\n")

    def write_traceback(self, run_id: str, text: str) -> None:
        """Add a failure's traceback to traceback.txt (atomically: a reader sees all of it or none)."""
        target = self.path(run_id) / "traceback.txt"
        earlier = target.read_text(encoding="utf-8") + "\n" if target.exists() else ""
        _write_atomic(target, earlier + text)

    def read_traceback(self, run_id: str) -> str:
        """traceback.txt, or an empty string when the run has none."""
        target = self.path(run_id) / "traceback.txt"
        return target.read_text(encoding="utf-8") if target.exists() else ""

    def read_evals(self, run_id: str) -> pd.DataFrame:
        """eval.csv as a DataFrame (an older run's reads with the columns added since, empty)."""
        frame = pd.read_csv(self.path(run_id) / "eval.csv")
        return frame.assign(**{c: v for c, v in ADDED_EVAL_COLUMNS.items() if c not in frame.columns})

    def save_model(self, run_id: str, state_dict: dict[str, torch.Tensor]) -> Path:
        """Write model.pt (the state_dict) atomically."""
        target = self.path(run_id) / "model.pt"
        tmp = target.with_name(".model.pt.tmp")
        torch.save(state_dict, tmp)
        os.replace(tmp, target)
        return target

    def checkpoint_path(self, run_id: str) -> Path:
        """checkpoint.pt of a run."""
        return self.path(run_id) / "checkpoint.pt"

    def save_checkpoint(self, run_id: str, state: dict[str, Any]) -> None:
        """Write checkpoint.pt atomically: a temporary file in the run directory, flushed and fsynced, then
        renamed over the old one, so a kill at any moment leaves the old checkpoint or the new one."""
        _replace_atomically(self.checkpoint_path(run_id), lambda f: torch.save(state, f))

    def load_checkpoint(self, run_id: str) -> dict[str, Any] | None:
        """checkpoint.pt (weights_only=True: tensors, numbers and strings only), or None when there is none.
        A temporary file a kill left behind is never read."""
        target = self.checkpoint_path(run_id)
        if not target.exists():
            return None
        return torch.load(target, map_location="cpu", weights_only=True)

    def truncate_rows(self, run_id: str, last_step: int) -> None:
        """Drop the metrics.csv, eval.csv and samples.jsonl rows after last_step (rewritten atomically): a run
        resumed from a checkpoint at last_step then reads as one run with each step once."""
        for name in ("metrics.csv", "eval.csv"):
            path = self.path(run_id) / name
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
            step_at = next(csv.reader([lines[0]])).index("step") if lines else 0
            kept = lines[:1] + [line for line in lines[1:]
                                if line.endswith("\n") and int(next(csv.reader([line]))[step_at]) <= last_step]
            if len(kept) != len(lines):
                _write_atomic(path, "".join(kept))
        samples = self.path(run_id) / SAMPLES_FILE
        if samples.exists():  # a language run's generated text, also one line per evaluation step
            kept_samples = [s for s in self.samples(run_id) if s["step"] <= last_step]
            _write_atomic(samples, "".join(json.dumps(s) + "\n" for s in kept_samples))

    def load_model(self, run_id: str) -> dict[str, torch.Tensor]:
        """model.pt, loaded with weights_only=True (never arbitrary pickles)."""
        return torch.load(self.path(run_id) / "model.pt", map_location="cpu", weights_only=True)

    def list_runs(self) -> list[str]:
        """Run ids on disk, oldest first."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and _RUN_ID_RE.match(p.name))

    def delete(self, run_id: str) -> None:
        """Remove a run's directory."""
        shutil.rmtree(self.path(run_id))

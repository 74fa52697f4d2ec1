"""The run store: one directory per run, the only place that knows where a run's files are.

runs/<run_id>/ holds config.json, status.json, metrics.csv, eval.csv, at the end model.pt, and
traceback.txt when a run failed; a run with checkpoints checkpoint.pt, a language run samples.jsonl,
a planned run plan.json, a tagged run tags.json (its tags, kept apart from its frozen config), a run
with --tensorboard on tb/ (TensorBoard's event files: gaccum_core.tensorboard.out); a run in a worker
process also gets `stop` when asked to stop, and a data-parallel run torchrun/ (torchrun's
per-rank error files). runs/sweeps/ is no run: it holds each sweep's spec and summary
(gaccum_core.sweeps). How each file is written so that a reader in another process never sees half
of it: gaccum_core.runs.files.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from gaccum_core.config import RunConfig
from gaccum_core.runs.files import (EVALS_FILE, METRICS_FILE, SAMPLES_FILE, CsvFollower, RunWriter, remove_temporaries,
                                    replace_atomically, truncate_csv, write_small_file, write_text_atomically)
from gaccum_core.states import RunState
from gaccum_core.train.metrics import ADDED_COLUMNS, ADDED_EVAL_COLUMNS, Row

TB_DIR = "tb"  # a run's TensorBoard event files, in its folder (gaccum_core.tensorboard.out writes them)
# status.json's list of the settings an imported run's hparams named (gaccum_core.tensorboard.importing): its
# config's other values are gaccum's defaults.
IMPORTED_SETTINGS = "imported_settings"

if TYPE_CHECKING:
    import pandas as pd
    import torch

_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_SLUG_RE = re.compile(r"[^A-Za-z0-9_-]+")
# A folder of the runs directory that holds no run: sweeps/<id>/ keeps each sweep's spec and summary.
SWEEPS_DIR = "sweeps"


class StoreError(ValueError):
    """A run id or the runs directory is not usable; the message says why."""


def validate_run_id(run_id: str) -> str:
    """Return run_id if it is a plain directory name (no separators, no '..'), else raise StoreError."""
    if not isinstance(run_id, str) or not _RUN_ID_RE.match(run_id) or ".." in run_id:
        raise StoreError(f"run id {run_id!r} is not allowed: letters, digits, '_', '-', '.' only, no '..' or '/'")
    if run_id == SWEEPS_DIR:
        raise StoreError(f"run id {run_id!r} is not allowed: the runs directory's folder of sweeps")
    return run_id


TAGS_FILE = "tags.json"
MAX_TAGS, MAX_TAG_CHARS = 16, 32
# Letters (of any script), digits and a few joiners; no space or comma, which separate tags where typed.
_TAG_RE = re.compile(r"^[^\W_][\w.:+=-]*$")
_TAG_RULE = f"1 to {MAX_TAG_CHARS} letters, digits or _ . : + = - (starting with a letter or digit)"


def validate_tags(tags: Iterable[str]) -> list[str]:
    """The tags, each once in the order given; StoreError naming the first bad tag and what is allowed."""
    kept = list(dict.fromkeys(tags))
    for tag in kept:
        if not isinstance(tag, str) or not _TAG_RE.match(tag):
            raise StoreError(f"tags: {tag!r} is not allowed: each tag is {_TAG_RULE}")
        if len(tag) > MAX_TAG_CHARS:
            raise StoreError(f"tags: {tag[:MAX_TAG_CHARS]!r}… ({len(tag)} characters) is too long: "
                             f"at most {MAX_TAG_CHARS} characters")
    if len(kept) > MAX_TAGS:
        raise StoreError(f"tags: {len(kept)} tags given, at most {MAX_TAGS} tags per run")
    return kept


def parse_tags(text: str) -> list[str]:
    """Comma-separated tags as typed ("baseline, fp16") as a validated list; empty items are dropped."""
    return validate_tags(t.strip() for t in text.split(",") if t.strip())


def now_iso() -> str:
    """The current UTC time as ISO 8601."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def known_settings(status: Mapping[str, Any]) -> frozenset[str] | None:
    """The settings an imported run's hparams named, from its status; None for a run of gaccum's (all known)."""
    if status.get("state") != RunState.IMPORTED:
        return None
    named = status.get(IMPORTED_SETTINGS)
    return frozenset(name for name in named if isinstance(name, str)) if isinstance(named, list) else frozenset()


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
        import torch  # on use: listing and reading runs (the home page) needs no torch
        self._ensure_writable_root()
        run_id = self.new_run_id(name)
        run_dir = self.path(run_id)
        try:
            run_dir.mkdir()
            write_text_atomically(run_dir / "config.json", config.to_json() + "\n")
            self._write_status(run_dir, {"run_id": run_id, "name": name or "", "state": RunState.QUEUED,
                                         "message": "", "created": now_iso(),
                                         "torch_version": torch.__version__})
            RunWriter(run_dir).close()
            if plan is not None:
                write_text_atomically(run_dir / "plan.json", json.dumps(plan, indent=2) + "\n")
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
        write_small_file(run_dir / "status.json", json.dumps(status, indent=2) + "\n")  # even on a full disk

    def remove_temporaries(self, run_id: str) -> list[str]:
        """Delete the temporary files a kill or a full disk left in the run's directory (only while this
        process owns the run); their names."""
        return remove_temporaries(self.path(run_id))

    def update_status(self, run_id: str, **fields: Any) -> dict[str, Any]:
        """Merge fields into status.json (atomically) and return the new status."""
        status = {**self.read_status(run_id), **fields}
        self._write_status(self.path(run_id), status)
        return status

    def read_status(self, run_id: str) -> dict[str, Any]:
        """status.json as a dict; StoreError when it holds another JSON value ([], null, 7: edited by hand)."""
        status = json.loads((self.path(run_id) / "status.json").read_text(encoding="utf-8"))
        if not isinstance(status, dict):
            kind = "null" if status is None else type(status).__name__
            raise StoreError(f"status.json of run {run_id} holds a JSON {kind}, not an object")
        return status

    def read_config(self, run_id: str) -> RunConfig:
        """config.json as a validated RunConfig."""
        return RunConfig.load(self.path(run_id) / "config.json")

    def writer(self, run_id: str) -> RunWriter:
        """A sink appending to this run's CSV files."""
        return RunWriter(self.path(run_id))

    def tensorboard_dir(self, run_id: str) -> Path:
        """The folder of the run's TensorBoard event files."""
        return self.path(run_id) / TB_DIR

    def read_metrics(self, run_id: str) -> pd.DataFrame:
        """metrics.csv as a DataFrame (one row per optimizer step); a run written before a column was
        added reads with that column's value for such runs."""
        import pandas as pd  # on use: a worker process, which never reads a table, starts 0.5 s sooner

        frame = pd.read_csv(self.path(run_id) / METRICS_FILE)
        return frame.assign(**{c: v for c, v in ADDED_COLUMNS.items() if c not in frame.columns})

    def metrics_csv(self, run_id: str) -> bytes:
        """metrics.csv as written, for a download."""
        return (self.path(run_id) / METRICS_FILE).read_bytes()

    def evals_csv(self, run_id: str) -> bytes:
        """eval.csv as written, for a download."""
        return (self.path(run_id) / EVALS_FILE).read_bytes()

    def followers(self, run_id: str) -> tuple[CsvFollower, CsvFollower]:
        """Readers of the rows metrics.csv and eval.csv gain while another process writes them."""
        run_dir = self.path(run_id)
        return CsvFollower(run_dir / METRICS_FILE), CsvFollower(run_dir / EVALS_FILE)

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
        text = json.dumps({**config.to_dict(), "history": history}, indent=2, sort_keys=True) + "\n"
        write_text_atomically(self.path(run_id) / "config.json", text)

    def write_traceback(self, run_id: str, text: str) -> None:
        """Add a failure's traceback to traceback.txt (atomically: a reader sees all of it or none)."""
        target = self.path(run_id) / "traceback.txt"
        earlier = target.read_text(encoding="utf-8") + "\n" if target.exists() else ""
        write_text_atomically(target, earlier + text)

    def read_tags(self, run_id: str) -> list[str]:
        """The run's tags (tags.json), [] when it has none; StoreError when the file is not a list of tags."""
        path = self.path(run_id) / TAGS_FILE
        if not path.exists():
            return []
        try:
            tags = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(tags, list):
                raise ValueError(f"holds a JSON {type(tags).__name__}, not a list")
            return validate_tags(tags)
        except (OSError, ValueError) as exc:  # StoreError and JSON's errors are ValueErrors
            raise StoreError(f"{TAGS_FILE} of run {run_id} cannot be read: {str(exc)[:200]}") from None

    def write_tags(self, run_id: str, tags: Iterable[str]) -> list[str]:
        """Replace the run's tags (validated first, then written atomically); the tags written."""
        kept = validate_tags(tags)
        write_text_atomically(self.path(run_id) / TAGS_FILE, json.dumps(kept) + "\n")
        return kept

    def read_traceback(self, run_id: str) -> str:
        """traceback.txt, or an empty string when the run has none."""
        target = self.path(run_id) / "traceback.txt"
        return target.read_text(encoding="utf-8") if target.exists() else ""

    def read_evals(self, run_id: str) -> pd.DataFrame:
        """eval.csv as a DataFrame (an older run's reads with the columns added since, empty)."""
        import pandas as pd  # on use, as in read_metrics

        frame = pd.read_csv(self.path(run_id) / EVALS_FILE)
        return frame.assign(**{c: v for c, v in ADDED_EVAL_COLUMNS.items() if c not in frame.columns})

    def save_model(self, run_id: str, state_dict: dict[str, torch.Tensor]) -> Path:
        """Write model.pt (the state_dict) atomically."""
        import torch
        target = self.path(run_id) / "model.pt"
        replace_atomically(target, lambda f: torch.save(state_dict, f))
        return target

    def checkpoint_path(self, run_id: str) -> Path:
        """checkpoint.pt of a run (written, read and checked by gaccum_core.train.checkpoint)."""
        return self.path(run_id) / "checkpoint.pt"

    def truncate_rows(self, run_id: str, last_step: int, last_eval_step: int | None = None) -> None:
        """Drop the metrics.csv rows after last_step and the eval.csv and samples.jsonl rows after
        last_eval_step (default last_step), rewritten atomically: a run resumed from a checkpoint taken
        at last_step, having evaluated up to last_eval_step, then reads as one run with each row once (its
        TensorBoard events are cut back beside it: gaccum_core.execution.resume).
        (A checkpoint at an epoch's last step precedes that epoch's evaluation, which the resumed run redoes.)"""
        last_eval_step = last_step if last_eval_step is None else last_eval_step
        truncate_csv(self.path(run_id) / METRICS_FILE, last_step)
        truncate_csv(self.path(run_id) / EVALS_FILE, last_eval_step)
        samples = self.path(run_id) / SAMPLES_FILE
        if samples.exists():  # a language run's generated text, also one line per evaluation step
            kept_samples = [s for s in self.samples(run_id) if s["step"] <= last_eval_step]
            write_text_atomically(samples, "".join(json.dumps(s) + "\n" for s in kept_samples))

    def model_shapes(self, run_id: str) -> dict[str, torch.Size] | None:
        """The shapes of model.pt's tensors (mapped, not read); None when the run has no model.pt that loads."""
        import torch
        path = self.path(run_id) / "model.pt"
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True) if path.exists() else None
        except Exception:  # noqa: BLE001 - a damaged model.pt is no measure of the model; the run rewrites it
            return None
        if not isinstance(state, dict) or not all(torch.is_tensor(v) for v in state.values()):
            return None
        return {key: value.shape for key, value in state.items()}

    def load_model(self, run_id: str) -> dict[str, torch.Tensor]:
        """model.pt, loaded with weights_only=True (never arbitrary pickles)."""
        import torch
        return torch.load(self.path(run_id) / "model.pt", map_location="cpu", weights_only=True)

    def list_runs(self) -> list[str]:
        """Run ids on disk, oldest first."""
        if not self.root.is_dir():
            return []
        with os.scandir(self.root) as entries:  # is_dir() from the entry's type: no stat per run (10,000 of them)
            return sorted(e.name for e in entries if _RUN_ID_RE.match(e.name) and e.name != SWEEPS_DIR and e.is_dir())

    def delete(self, run_id: str) -> None:
        """Remove a run's directory."""
        shutil.rmtree(self.path(run_id))

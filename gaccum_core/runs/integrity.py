"""Whether a run's files are what the run store writes: each damage named by its file and what is wrong.

A run whose files were edited, cut or overwritten by hand reads as one `damaged` row in the listing
and is refused by resume with a one-line message, before any file changes. Only what a reader needs
is read: status.json and config.json whole, the CSV files as text and tables, checkpoint.pt's zip
directory (its tensors are read by resume only).
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from gaccum_core.config import RunConfig
from gaccum_core.runs.files import EVALS_FILE, METRICS_FILE
from gaccum_core.runs.store import RunStore, StoreError
from gaccum_core.states import RunState
from gaccum_core.train.metrics import EVAL_COLUMNS, STEP_COLUMNS

if TYPE_CHECKING:  # pandas on use: `python -m gaccum_core worker` imports this module, and never a table
    import pandas as pd

_STATES = tuple(s.value for s in RunState if s not in (RunState.INTERRUPTED, RunState.DAMAGED))
_TEXT_FIELDS = ("run_id", "name", "message", "created", "ended", "started", "device", "weights")


class DamagedRun(ValueError):
    """A run file does not hold what the run store writes; the message names the file and the damage."""


@dataclass(frozen=True)
class RunFiles:
    """A run's files as read and checked."""

    status: dict[str, Any]
    config: RunConfig
    metrics: pd.DataFrame
    evals: pd.DataFrame


def _few(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", …" if len(names) > 3 else "")


def checked_status(status: object) -> dict[str, Any]:
    """status.json's content if it is an object with a known state and text where text belongs."""
    if not isinstance(status, dict):
        raise ValueError(f"holds a JSON {type(status).__name__}, not an object")
    state = status.get("state")
    if not isinstance(state, str) or state not in _STATES:
        raise ValueError(f"has state {state!r}: not one of {', '.join(_STATES)}")
    wrong = [k for k in _TEXT_FIELDS if k in status and not isinstance(status[k], str)]
    if wrong:
        raise ValueError(f"has {_few(wrong)} that {'is' if len(wrong) == 1 else 'are'} not text")
    pid = status.get("pid")
    if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool)):
        raise ValueError(f"has pid {pid!r}, not a process id")
    return status


def check_lines(path: Path) -> None:
    """A CSV file the run store appended: UTF-8 text with a header and no blank line (a last line a kill
    cut short is allowed: resume drops it)."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"is not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x}): binary or "
                         "overwritten") from None
    if not text:
        raise ValueError("is empty: its header row is missing")
    lines = text.split("\n")
    blank = next((n for n, line in enumerate(lines[:-1], start=1) if not line.strip()), None)
    if blank is not None:
        raise ValueError(f"has a blank line (line {blank}): edited by hand")


def checked_table(frame: pd.DataFrame, columns: tuple[str, ...], filled: tuple[str, ...]) -> pd.DataFrame:
    """frame if it has every column, numbers only and finite `filled` cells in every row; else ValueError."""
    import numpy as np
    import pandas as pd

    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"lacks {len(missing)} of its {len(columns)} columns ({_few(missing)}): "
                         "its header row is missing or edited")
    if len(frame):
        text = [c for c in columns if not pd.api.types.is_numeric_dtype(frame[c])]
        if text:
            raise ValueError(f"holds text where numbers belong ({_few(text)})")
        empty = [c for c in filled if not np.isfinite(frame[c].to_numpy(dtype=float)).all()]
        if empty:
            raise ValueError(f"has a row without {', '.join(empty)}: a truncated or edited row")
    return frame


def _checked_csv(path: Path, read: Callable[[], pd.DataFrame], columns: tuple[str, ...],
                 filled: tuple[str, ...]) -> pd.DataFrame:
    check_lines(path)
    return checked_table(read(), columns, filled)


def check_checkpoint_file(path: Path) -> None:
    """checkpoint.pt, when there is one, is a whole torch archive (a zip whose directory reads)."""
    if not path.exists():
        return
    if path.stat().st_size == 0:
        raise ValueError("is empty: a write was cut short")
    if not zipfile.is_zipfile(path):
        raise ValueError("is not a torch checkpoint (no zip directory): cut short or overwritten")


def _filled_steps(status: dict[str, Any]) -> tuple[str, ...]:
    """The metrics.csv cells every row of this run has: an imported run's rows tell nothing of skipped steps."""
    return ("step",) if status.get("state") == RunState.IMPORTED else ("step", "skipped_total")


def read_run(store: RunStore, run_id: str) -> RunFiles:
    """status, config, metrics and evals of a run, each checked to be what the run store writes, and its
    checkpoint's archive; DamagedRun naming the file that is not."""
    run_dir = store.path(run_id)
    readers: dict[str, Callable[[], Any]] = {
        "status.json": lambda: checked_status(store.read_status(run_id)),
        "config.json": lambda: store.read_config(run_id),
        METRICS_FILE: lambda: _checked_csv(run_dir / METRICS_FILE, lambda: store.read_metrics(run_id),
                                           STEP_COLUMNS, _filled_steps(parts[0])),
        EVALS_FILE: lambda: _checked_csv(run_dir / EVALS_FILE, lambda: store.read_evals(run_id),
                                         EVAL_COLUMNS, ("step",)),
        "checkpoint.pt": lambda: check_checkpoint_file(store.checkpoint_path(run_id)),
    }
    parts = []
    for name, read in readers.items():
        try:
            parts.append(read())
        except FileNotFoundError:
            raise DamagedRun(f"{name} of run {run_id} is missing") from None
        except StoreError as exc:  # the store's own reading errors name the file and the run
            raise DamagedRun(str(exc)[:300]) from None
        except (OSError, ValueError) as exc:  # ConfigError, JSON, pandas and decoding errors are ValueErrors
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise DamagedRun(f"{name} of run {run_id} {_verb(exc)}{detail[:240]}") from None
    return RunFiles(*parts[:4])


def _verb(exc: Exception) -> str:
    """Our checks' messages read on from the file's name ('is empty'); a library's error is quoted."""
    if type(exc) is ValueError:
        return ""
    return f"cannot be read ({type(exc).__name__}): "

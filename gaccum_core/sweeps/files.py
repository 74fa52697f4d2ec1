"""Where a sweep's own files live: <runs-dir>/sweeps/<id>/spec.json (written before its first run) and
summary.csv (written after its last). Its runs are ordinary runs of the run store beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from gaccum_core.config import ConfigError
from gaccum_core.runs.files import write_text_atomically
from gaccum_core.runs.store import SWEEPS_DIR
from gaccum_core.sweeps.spec import SweepSpec

if TYPE_CHECKING:
    import pandas as pd

SPEC_FILE, SUMMARY_FILE = "spec.json", "summary.csv"


def sweep_dir(runs_dir: str | Path, sweep_id: str) -> Path:
    """<runs-dir>/sweeps/<id>."""
    return Path(runs_dir) / SWEEPS_DIR / sweep_id


def write_spec(runs_dir: str | Path, spec: SweepSpec) -> Path:
    """spec.json of the sweep, written atomically (its directory made first); the directory."""
    where = sweep_dir(runs_dir, spec.sweep_id)
    where.mkdir(parents=True, exist_ok=True)
    write_text_atomically(where / SPEC_FILE, json.dumps(spec.to_dict(), indent=2, default=str) + "\n")
    return where


def read_spec(runs_dir: str | Path, sweep_id: str) -> SweepSpec:
    """The spec of a sweep on disk; ConfigError when spec.json is not one, OSError when missing."""
    text = (sweep_dir(runs_dir, sweep_id) / SPEC_FILE).read_text(encoding="utf-8")
    try:
        return SweepSpec.from_dict(json.loads(text))
    except json.JSONDecodeError as exc:
        raise ConfigError("spec", text[:40], f"valid JSON ({exc.msg})") from None


def write_summary(runs_dir: str | Path, sweep_id: str, summary: pd.DataFrame) -> Path:
    """summary.csv of the sweep, written atomically; its path."""
    target = sweep_dir(runs_dir, sweep_id) / SUMMARY_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(target, summary.to_csv(index=False))
    return target


def list_sweeps(runs_dir: str | Path) -> list[str]:
    """The ids of the sweeps on disk (those with a spec.json), newest first."""
    root = Path(runs_dir) / SWEEPS_DIR
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if (p / SPEC_FILE).is_file()]
    return [p.name for p in sorted(found, key=lambda p: (p / SPEC_FILE).stat().st_mtime, reverse=True)]

"""What bench_ui_load reads from the runs directory: the setup typed into the Train page, the run it started (its
directory appearing, its state, its config) and the run's speed from its metrics.csv. No browser here."""

from __future__ import annotations

import csv
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

RUN_TIMEOUT_S = 900.0
FINAL_STATES = {"finished", "stopped", "failed", "diverged"}


@dataclass(frozen=True)
class Setup:
    """The run config typed into the Train page."""

    model: str
    epochs: int
    image_size: int
    micro_batch_size: int
    accum_steps: int
    seed: int
    max_steps: int = 0

    def spinbuttons(self) -> list[tuple[str, int]]:
        """(label in controls.py, value) of every number input this bench sets."""
        return [("Image size (0 = the data set's own)", self.image_size), ("Micro-batch size b", self.micro_batch_size),
                ("Accumulation steps k", self.accum_steps), ("Epochs", self.epochs),
                ("Max optimizer steps (0 = no limit)", self.max_steps), ("Seed", self.seed)]

    def expected(self) -> dict[str, object]:
        """What the run's config.json must hold for the run to be this setup."""
        return {"model": self.model, "dataset": "digits", "epochs": self.epochs, "image_size": self.image_size,
                "micro_batch_size": self.micro_batch_size, "accum_steps": self.accum_steps, "seed": self.seed,
                "max_steps": self.max_steps, "device": "auto", "compile": "off", "amp": "off"}

    def describe(self) -> str:
        """One line for the report."""
        return (f"model={self.model} dataset=digits image_size={self.image_size} b={self.micro_batch_size} "
                f"k={self.accum_steps} epochs={self.epochs} max_steps={self.max_steps} seed={self.seed} "
                "(other controls at their defaults: device auto, amp off, compile off)")


@dataclass(frozen=True)
class RunSpeed:
    """A finished run's speed, from its metrics.csv."""

    run_id: str
    steps: int
    duration_s: float
    samples_per_s: float  # samples after the first step / their wall time
    median_step_samples_per_s: float


# ---------------------------------------------------------------- run directories


def run_dirs(runs: Path) -> set[str]:
    """Run ids in the runs directory."""
    return {p.name for p in runs.iterdir() if p.is_dir()}


def wait_new_run(runs: Path, before: set[str], timeout_s: float = 60.0) -> str:
    """The id of the run directory that appears after `before`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        new = run_dirs(runs) - before
        if new:
            return new.pop()
        time.sleep(0.02)
    raise TimeoutError(f"no run directory appeared in {runs} within {timeout_s} s of pressing Start")


def wait_running(run_dir: Path, timeout_s: float = 60.0) -> None:
    """Until the new run has left 'queued' (its directory exists before its thread starts it)."""
    deadline = time.monotonic() + timeout_s
    while run_state(run_dir) in ("", "queued"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{run_dir.name} was still queued {timeout_s} s after Start")
        time.sleep(0.02)


def run_state(run_dir: Path) -> str:
    """state in status.json ('' while it is being rewritten)."""
    try:
        return json.loads((run_dir / "status.json").read_text())["state"]
    except (OSError, ValueError, KeyError):
        return ""


def wait_done(run_dir: Path, timeout_s: float = RUN_TIMEOUT_S) -> str:
    """Block until the run ends; its final state."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = run_state(run_dir)
        if state in FINAL_STATES:
            return state
        time.sleep(0.25)
    raise TimeoutError(f"{run_dir.name} did not end within {timeout_s} s")


def check_config(run_dir: Path, setup: Setup) -> None:
    """Raise unless the run trained exactly `setup` (the page's controls took every value)."""
    config = json.loads((run_dir / "config.json").read_text())
    wrong = {k: (config.get(k), v) for k, v in setup.expected().items() if config.get(k) != v}
    if wrong:
        raise RuntimeError(f"run {run_dir.name} has other settings than typed: {wrong} (got, wanted)")


def run_speed(run_dir: Path) -> RunSpeed:
    """Samples/s of a finished run from its metrics.csv, leaving out the first step (warm-up)."""
    with open(run_dir / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    if len(rows) < 3:
        raise RuntimeError(f"run {run_dir.name} logged only {len(rows)} steps: too short to time")
    first, last = rows[0], rows[-1]
    samples = float(last["samples_seen"]) - float(first["samples_seen"])
    seconds = float(last["wall_time_s"]) - float(first["wall_time_s"])
    per_step = statistics.median(float(r["samples_per_s"]) for r in rows[1:] if r["samples_per_s"])
    return RunSpeed(run_dir.name, len(rows), float(last["wall_time_s"]), samples / seconds, per_step)

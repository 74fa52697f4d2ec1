"""bench/bench_activation_checkpointing.py --quick: a smoke run that prints every variant's row, and full
checkpointing counts fewer activation MB than off (the point of checkpointing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_prints_every_variant_and_full_checkpointing_saves_activations():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_activation_checkpointing.py"), "--quick"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    header, rows = lines[0], [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]
    assert header.startswith("| model | b | checkpointing |") and "activation MB" in header
    assert len(rows) == 12  # 2 models × 2 micro-batch sizes × 3 modes
    assert {(row[0].split()[0], row[1], row[2]) for row in rows} == {
        (model, b, mode) for model in ("gpt", "hf") for b in ("4", "16") for mode in ("off", "selective", "full")}
    activation = {row[2]: float(row[5]) for row in rows if row[0].startswith("gpt") and row[1] == "16"}
    assert 0 < activation["full"] < activation["off"]

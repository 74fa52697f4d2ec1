"""bench/bench_activation_checkpointing.py --quick: a smoke run that prints every variant's row, and full
checkpointing counts fewer activation MB than off (the point of checkpointing); the allocator's peak reads
"-" on the CPU, --json adds one JSON line of every row, and the run needs neither streamlit nor plotly.
On gpt tiny and 64 tokens, not the bench's mini and 128: every variant still runs, at a quarter of the work."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.multiprocess  # each benchmark runs in a fresh Python process (conftest.py)


def test_quick_run_prints_every_variant_and_full_checkpointing_saves_activations(run_bench):
    done = run_bench("bench_activation_checkpointing", "--quick", "--preset", "tiny", "--max-seq-len", "64",
                     "--device", "cpu", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    header, rows = lines[0], [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]
    assert header.startswith("| model | b | checkpointing |") and "activation MB" in header
    assert header.endswith("| allocator peak MB (CUDA) |") and {row[7] for row in rows} == {"-"}
    assert len(rows) == 12  # 2 models × 2 micro-batch sizes × 3 modes
    assert {(row[0].split()[0], row[1], row[2]) for row in rows} == {
        (model, b, mode) for model in ("gpt", "hf") for b in ("4", "16") for mode in ("off", "selective", "full")}
    activation = {row[2]: float(row[5]) for row in rows if row[0].startswith("gpt") and row[1] == "16"}
    assert 0 < activation["full"] < activation["off"]

    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert {key: figures[key] for key in ("bench", "device", "device_name", "rounds", "steps")} == {
        "bench": "activation_checkpointing", "device": "cpu", "device_name": "CPU", "rounds": 1, "steps": 1}
    assert [(row["model"], str(row["b"]), row["mode"]) for row in figures["rows"]] == [tuple(r[:3]) for r in rows]
    for row, cells in zip(figures["rows"], rows):
        assert set(row) == {"model", "b", "mode", "samples_per_s", "speed_ratio", "activation_mb",
                            "activation_ratio", "peak_mb"}
        assert f"{row['activation_mb']:.2f}" == cells[5] and row["peak_mb"] is None

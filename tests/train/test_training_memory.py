"""Training memory in every step row: the figure the planner counts (weights + gradients + optimizer
state + activations), cheap per step, and old runs without these columns still readable and resumable."""

import pytest

from gaccum_core.config import RunConfig
from gaccum_core.runs.store import RunStore
from gaccum_core.train import memory
from gaccum_core.train.engine import Engine
from gaccum_core.train.memory import MB, tensor_bytes, training_memory
from gaccum_core.train.metrics import ADDED_COLUMNS, STEP_COLUMNS, TRAINING_MEMORY_COLUMNS, RowKeeper


def rows(**fields):
    engine = Engine(RunConfig(**{"device": "cpu", "model": "cnn", "max_steps": 2, **fields}))
    sink = RowKeeper()
    engine.run(sink, evaluate=False)
    return engine, sink.steps


def test_each_row_counts_what_the_planner_counts():
    engine, steps = rows(optimizer="adam", lr=1e-3)
    row = steps[-1]
    weights = tensor_bytes(engine.model.parameters()) / MB  # cnn: no buffers
    assert row["weights_mb"] == pytest.approx(weights) and row["gradients_mb"] == pytest.approx(weights)
    assert row["optimizer_mb"] >= 2 * weights  # Adam's two moments per parameter
    assert row["train_mem_mb"] == pytest.approx(row["weights_mb"] + row["gradients_mb"] + row["optimizer_mb"]
                                                 + row["activation_mb"])
    planner = training_memory(engine, engine.activations.peak)  # gaccum_core.plan.probe uses this one
    assert planner["counted_mb"] == pytest.approx(row["train_mem_mb"])


def test_accumulation_saves_activations_and_the_training_memory_shows_it():
    _, small = rows(micro_batch_size=8, accum_steps=4)
    _, large = rows(micro_batch_size=32, accum_steps=1)
    saved = large[-1]["activation_mb"] - small[-1]["activation_mb"]
    # What backward keeps per 1x8x8 digit in the cnn, from its shapes (fp32): the input (conv 1), both ReLU
    # outputs (16x8x8, 32x8x8), the pooled 32x4x4 (the linear layer's input), the 10 log-softmax values,
    # and the int64 label: 24 samples fewer per micro-batch save 24 times that.
    per_sample = 4 * (1 * 8 * 8 + 16 * 8 * 8 + 32 * 8 * 8 + 32 * 4 * 4 + 10) + 8
    assert saved == pytest.approx(24 * per_sample / MB, rel=0.01)
    assert large[-1]["train_mem_mb"] - small[-1]["train_mem_mb"] == pytest.approx(saved)


def test_the_optimizer_state_is_counted_once_it_exists_and_not_walked_every_step(monkeypatch):
    calls = []
    real = memory.tensor_bytes
    monkeypatch.setattr(memory, "tensor_bytes", lambda tensors: calls.append(1) or real(tensors))
    _, short = rows(max_steps=2)
    short_calls = len(calls)
    calls.clear()
    _, long = rows(max_steps=8)
    assert len(calls) == short_calls  # the same few counts however many steps: none per step
    assert long[0]["optimizer_mb"] > 0 and long[-1]["optimizer_mb"] == long[0]["optimizer_mb"]  # SGD momentum


def test_a_run_written_before_the_training_memory_columns_reads_and_resumes(tmp_path):
    store = RunStore(tmp_path)
    run_id = store.create(RunConfig())
    old = [c for c in STEP_COLUMNS if c not in TRAINING_MEMORY_COLUMNS]
    (store.path(run_id) / "metrics.csv").write_text(",".join(old) + "\n" + ",".join("1" for _ in old) + "\n")
    assert set(TRAINING_MEMORY_COLUMNS) <= set(ADDED_COLUMNS)
    assert store.read_metrics(run_id)["train_mem_mb"].isna().all()
    writer = store.writer(run_id)  # what a resumed run appends with
    writer.log_step({column: 2 for column in STEP_COLUMNS})
    writer.close()
    frame = store.read_metrics(run_id)
    assert frame["step"].tolist() == [1, 2] and frame["train_mem_mb"].isna().all()

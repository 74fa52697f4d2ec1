"""The background runner: states, queueing, stop, failures with messages, snapshots."""

import threading

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.runner import Runner, failure_message

TINY = dict(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2)


def test_a_run_finishes_and_leaves_every_file(tmp_path):
    runner = Runner(tmp_path)
    run_id = runner.submit(RunConfig(max_steps=5, **TINY))
    snap = runner.wait(run_id, timeout=60)
    assert snap.state == "finished" and snap.steps_done == snap.total_steps == 5
    run_dir = tmp_path / run_id
    assert {"config.json", "status.json", "metrics.csv", "eval.csv", "model.pt"} <= {p.name for p in run_dir.iterdir()}
    frame = runner.store.read_metrics(run_id)
    assert frame["step"].tolist() == [1, 2, 3, 4, 5]
    assert frame["loss"].tolist() == pytest.approx([r["loss"] for r in snap.metrics])
    status = runner.store.read_status(run_id)
    assert status["state"] == "finished" and status["device"] == "CPU" and status["ended"]
    state = runner.store.load_model(run_id)
    assert all(isinstance(v, torch.Tensor) for v in state.values())


def test_runs_on_one_device_queue_and_stop_is_prompt(tmp_path):
    runner = Runner(tmp_path)
    first = runner.submit(RunConfig(epochs=50, **TINY))
    second = runner.submit(RunConfig(max_steps=2, **TINY))
    assert runner.snapshot(second).state == "queued"
    assert runner.snapshot(second).queue_position == 1
    while runner.snapshot(first).steps_done < 2:
        threading.Event().wait(0.01)
    runner.stop(first)
    snap = runner.wait(first, timeout=30)
    assert snap.state == "stopped" and snap.steps_done < snap.total_steps
    assert runner.store.read_status(first)["state"] == "stopped"
    assert len(runner.store.read_metrics(first)) == snap.steps_done
    assert runner.wait(second, timeout=60).state == "finished"


def test_stopping_a_queued_run_means_it_never_starts(tmp_path):
    runner = Runner(tmp_path)
    first = runner.submit(RunConfig(epochs=50, **TINY))
    second = runner.submit(RunConfig(max_steps=2, **TINY))
    runner.stop(second)
    assert runner.snapshot(second).state == "stopped"
    runner.stop(first)
    runner.wait(first, timeout=30)
    assert runner.snapshot(second).steps_done == 0


def test_a_failing_run_is_failed_with_a_message_and_the_next_one_works(tmp_path):
    runner = Runner(tmp_path)
    bad = runner.submit(RunConfig(**{**TINY, "model": "vit_b_16"}))  # 8x8 digits cannot feed a ViT
    snap = runner.wait(bad, timeout=60)
    assert snap.state == "failed" and "16" in snap.message
    assert runner.store.read_status(bad)["message"] == snap.message
    good = runner.submit(RunConfig(max_steps=1, **TINY))
    assert runner.wait(good, timeout=60).state == "finished"


def test_out_of_memory_message_advises_smaller_micro_batches_with_more_accumulation():
    message = failure_message(torch.OutOfMemoryError("CUDA out of memory."), RunConfig(micro_batch_size=64, accum_steps=2))
    assert "micro_batch_size=32" in message and "accum_steps=4" in message and "128" in message


def test_snapshot_is_a_copy(tmp_path):
    runner = Runner(tmp_path)
    run_id = runner.submit(RunConfig(max_steps=3, **TINY))
    snap = runner.wait(run_id, timeout=60)
    assert isinstance(snap.metrics, tuple) and len(snap.metrics) == 3
    assert snap.eta_s is None and snap.elapsed_s > 0

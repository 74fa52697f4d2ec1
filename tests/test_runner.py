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


def test_out_of_memory_mid_run_fails_with_advice_keeps_rows_and_the_next_run_works(tmp_path, monkeypatch):
    from gaccum_core.engine import Engine

    real_forward = Engine._forward_loss
    calls = []

    def forward_then_oom(self, x, y):
        calls.append(1)
        if len(calls) == 7:  # the 4th window's first micro-batch
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_forward(self, x, y)

    monkeypatch.setattr(Engine, "_forward_loss", forward_then_oom)
    runner = Runner(tmp_path)
    run_id = runner.submit(RunConfig(max_steps=10, **TINY))
    snap = runner.wait(run_id, timeout=60)
    assert snap.state == "failed"
    assert "out of memory" in snap.message and "accum_steps=4" in snap.message
    assert runner.store.read_metrics(run_id)["step"].tolist() == [1, 2, 3]
    assert "OutOfMemoryError" in (tmp_path / run_id / "traceback.txt").read_text()
    monkeypatch.setattr(Engine, "_forward_loss", real_forward)
    assert runner.wait(runner.submit(RunConfig(max_steps=2, **TINY)), timeout=60).state == "finished"


def test_compile_works_on_the_cpu_and_matches_eager(tmp_path):
    runner = Runner(tmp_path)
    eager = runner.wait(runner.submit(RunConfig(max_steps=3, **TINY)), timeout=60)
    compiled = runner.wait(runner.submit(RunConfig(max_steps=3, compile="default", **TINY)), timeout=600)
    assert compiled.state == "finished", compiled.message
    assert [r["loss"] for r in compiled.metrics] == pytest.approx([r["loss"] for r in eager.metrics], rel=1e-4)


def test_a_compile_failure_is_a_clear_message(tmp_path, monkeypatch):
    import torch._dynamo.exc

    def broken_compile(model, mode=None):
        def fail(*args, **kwargs):
            raise torch._dynamo.exc.TorchRuntimeError("backend='inductor' raised: gcc: not found")
        return fail

    monkeypatch.setattr(torch, "compile", broken_compile)
    runner = Runner(tmp_path)
    snap = runner.wait(runner.submit(RunConfig(max_steps=2, compile="max-autotune", **TINY)), timeout=60)
    assert snap.state == "failed"
    assert snap.message.startswith("torch.compile(mode='max-autotune') failed on cpu") and "compile to off" in snap.message

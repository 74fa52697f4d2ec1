"""The background runner: states, queueing, stop, failures with messages, snapshots."""

import copy
import dataclasses

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.execution.execute import failure_message
from gaccum_core.execution.runner import Runner

TINY = dict(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2)


def test_a_run_finishes_and_leaves_every_file(tmp_path):
    runner = Runner(tmp_path)
    run_id = runner.submit(RunConfig(max_steps=5, **TINY))
    snap = runner.wait(run_id)
    assert snap.state == "finished" and snap.steps_done == snap.total_steps == 5
    assert runner.worker_pid(run_id) is None and runner.spare_pid is None  # trained in this process
    run_dir = tmp_path / run_id
    assert {"config.json", "status.json", "metrics.csv", "eval.csv", "model.pt"} <= {p.name for p in run_dir.iterdir()}
    frame = runner.store.read_metrics(run_id)
    assert frame["step"].tolist() == [1, 2, 3, 4, 5]
    assert frame["loss"].tolist() == pytest.approx([r["loss"] for r in snap.metrics])
    status = runner.store.read_status(run_id)
    assert status["state"] == "finished" and status["device"] == "CPU" and status["ended"]
    state = runner.store.load_model(run_id)
    assert all(isinstance(v, torch.Tensor) for v in state.values())


def test_runs_on_one_device_queue_and_stop_is_prompt(tmp_path, gate):
    gate.hold(step=3)  # the first run is held mid-run: the second certainly queues behind it
    runner = Runner(tmp_path)
    first = runner.submit(RunConfig(epochs=50, **TINY))
    gate.wait_until_held()
    second = runner.submit(RunConfig(max_steps=2, **TINY))
    assert runner.snapshot(first).state == "running"
    assert runner.snapshot(second).state == "queued"
    assert runner.snapshot(second).queue_position == 1
    runner.stop(first)  # while step 3's first micro-batch runs: it ends before the next one
    gate.release()
    snap = runner.wait(first)
    assert snap.state == "stopped" and snap.steps_done == 2 < snap.total_steps
    assert runner.store.read_status(first)["state"] == "stopped"
    assert len(runner.store.read_metrics(first)) == snap.steps_done
    assert runner.wait(second).state == "finished"


def test_stopping_a_queued_run_means_it_never_starts(tmp_path, gate):
    gate.hold(step=1)  # the first run holds the device, so the second is still queued when stopped
    runner = Runner(tmp_path)
    first = runner.submit(RunConfig(epochs=50, **TINY))
    second = runner.submit(RunConfig(max_steps=2, **TINY))
    gate.wait_until_held()
    runner.stop(second)
    stopped = runner.snapshot(second)
    assert stopped.state == "stopped" and stopped.message == "stopped before it started"
    runner.stop(first)
    gate.release()
    assert runner.wait(first).state == "stopped"
    assert runner.snapshot(second) == stopped and runner.snapshot(second).steps_done == 0
    assert runner.store.read_status(second)["state"] == "stopped"
    assert runner.store.read_metrics(second).empty


def test_a_failing_run_is_failed_with_a_message_and_the_next_one_works(tmp_path):
    runner = Runner(tmp_path)
    bad = runner.submit(RunConfig(**{**TINY, "model": "vit_b_16"}))  # 8x8 digits cannot feed a ViT
    snap = runner.wait(bad)
    assert snap.state == "failed" and "16" in snap.message
    assert runner.store.read_status(bad)["message"] == snap.message
    good = runner.submit(RunConfig(max_steps=1, **TINY))
    assert runner.wait(good).state == "finished"


def test_out_of_memory_message_advises_smaller_micro_batches_with_more_accumulation():
    message = failure_message(torch.OutOfMemoryError("CUDA out of memory."), RunConfig(micro_batch_size=64, accum_steps=2))
    assert "micro_batch_size=32" in message and "accum_steps=4" in message and "128" in message


def _plain(snapshot):
    """The snapshot with each shared, read-only row copied into a plain dict."""
    return dataclasses.replace(snapshot, metrics=tuple(map(dict, snapshot.metrics)),
                               evals=tuple(map(dict, snapshot.evals)))


def test_a_snapshot_does_not_change_as_the_run_goes_on(tmp_path, gate):
    gate.hold(step=3)  # the run waits at step 3, so the snapshot is taken at a known point mid-run
    runner = Runner(tmp_path)
    run_id = runner.submit(RunConfig(max_steps=4, **TINY))
    gate.wait_until_held()
    early = runner.snapshot(run_id)
    kept = _plain(early)
    gate.release()
    final = runner.wait(run_id)
    assert final.state == "finished" and final.steps_done == 4 and len(final.metrics) == 4
    assert early.state == "running" and early.steps_done == 2 and early.eta_s is not None
    assert _plain(early) == kept  # every field, the rows' contents included, as it was when taken
    assert isinstance(early.metrics, tuple) and isinstance(early.evals, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        early.state = "finished"


def test_a_snapshots_rows_cannot_be_changed_under_the_run(tmp_path):
    """A UI that rounds, renames or extends rows must copy them: the shared rows refuse changes, so
    later snapshots and other sessions never see one session's edits."""
    runner = Runner(tmp_path)
    run_id = runner.submit(RunConfig(max_steps=3, **TINY))
    snap = runner.wait(run_id)
    assert snap.state == "finished" and len(snap.metrics) == 3 and snap.evals
    expected = copy.deepcopy(([dict(r) for r in snap.metrics], [dict(r) for r in snap.evals]))
    with pytest.raises(TypeError):
        snap.metrics[0]["loss"] = -1.0
    with pytest.raises((TypeError, AttributeError)):
        snap.metrics[1].clear()
    with pytest.raises(TypeError):
        snap.evals[0]["test_accuracy"] = 2.0
    mine = dict(snap.metrics[0])  # the way to change one
    mine["loss"] = -1.0
    again = runner.snapshot(run_id)
    assert ([dict(r) for r in again.metrics], [dict(r) for r in again.evals]) == expected
    assert runner.store.read_metrics(run_id)["loss"].tolist() == pytest.approx([r["loss"] for r in expected[0]])


def test_compile_works_on_the_cpu_and_matches_eager(tmp_path):
    runner = Runner(tmp_path)
    eager = runner.wait(runner.submit(RunConfig(max_steps=3, **TINY)))
    compiled = runner.wait(runner.submit(RunConfig(max_steps=3, compile="default", **TINY)))
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
    snap = runner.wait(runner.submit(RunConfig(max_steps=2, compile="max-autotune", **TINY)))
    assert snap.state == "failed"
    assert snap.message.startswith("torch.compile(mode='max-autotune') failed on cpu") and "compile to off" in snap.message

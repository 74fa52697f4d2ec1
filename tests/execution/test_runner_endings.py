"""The runner never leaves a run running: whatever raises, and wherever, the run ends with a message."""

from __future__ import annotations

import json
import threading

import pytest

import gaccum_core.execution.execute
from gaccum_core import faults
from gaccum_core.config import RunConfig
from gaccum_core.execution.runner import Runner
from gaccum_core.states import FINAL_STATES, RunState

CONFIG = RunConfig(model="mlp", dataset="digits", micro_batch_size=32, accum_steps=1, max_steps=2, device="cpu")
CUDA_ERROR = "CUDA error: an illegal memory access was encountered"


def _status(runner: Runner, run_id: str) -> dict:
    return json.loads((runner.store.path(run_id) / "status.json").read_text())


def _poisoned_cleanup(device):
    raise RuntimeError(CUDA_ERROR)  # what torch.cuda.empty_cache() raises once a CUDA error poisoned the context


def _ended(runner: Runner, run_id: str):
    snapshot = runner.wait(run_id, timeout=300)
    assert snapshot.done, f"run {run_id} never ended: {snapshot.state}"
    return snapshot


def test_a_cleanup_that_raises_fails_the_run_with_a_message_and_the_next_run_still_works(tmp_path, monkeypatch):
    monkeypatch.setattr(gaccum_core.execution.execute, "clear_cache", _poisoned_cleanup)
    runner = Runner(tmp_path)
    first, second = runner.submit(CONFIG), runner.submit(CONFIG)
    for run_id in (first, second):  # before the fix the first killed the worker and both stayed running
        snapshot = _ended(runner, run_id)
        assert snapshot.state == RunState.FAILED
        assert "releasing" in snapshot.message and CUDA_ERROR in snapshot.message
        assert "it had finished" in snapshot.message
        status = _status(runner, run_id)
        assert status["state"] == "failed" and CUDA_ERROR in status["message"]
        assert CUDA_ERROR in runner.store.read_traceback(run_id)
    monkeypatch.undo()
    third = runner.submit(CONFIG)
    assert _ended(runner, third).state == RunState.FINISHED


def test_a_cleanup_failure_after_a_failed_run_keeps_both_messages(tmp_path, monkeypatch):
    monkeypatch.setattr(gaccum_core.execution.execute, "clear_cache", _poisoned_cleanup)
    runner = Runner(tmp_path)
    faults.arm(faults.Fault("oom", step=2))
    try:
        snapshot = _ended(runner, runner.submit(CONFIG))
    finally:
        faults.disarm()
    assert snapshot.state == RunState.FAILED
    assert "out of memory" in snapshot.message and CUDA_ERROR in snapshot.message
    assert "OutOfMemoryError" in runner.store.read_traceback(snapshot.run_id)


def test_a_run_whose_directory_vanished_before_it_started_fails_and_the_queue_moves_on(tmp_path):
    runner = Runner(tmp_path)
    gate = threading.Event()
    real_update = runner.store.update_status

    def held(run_id, **fields):
        if fields.get("state") == RunState.RUNNING:
            gate.wait(60)
        return real_update(run_id, **fields)

    runner.store.update_status = held
    first = runner.submit(CONFIG)
    second = runner.submit(CONFIG)
    runner.store.delete(first)  # the Runs page deleting it while the worker picks it up
    gate.set()
    snapshot = _ended(runner, first)
    assert snapshot.state == RunState.FAILED and snapshot.message
    assert _ended(runner, second).state == RunState.FINISHED


def test_a_status_file_that_cannot_be_written_at_the_end_still_ends_the_run_in_memory(tmp_path):
    runner = Runner(tmp_path)
    real_update = runner.store.update_status

    def disk_full_at_the_end(run_id, **fields):
        if fields.get("state") in FINAL_STATES:
            raise OSError(28, "No space left on device")
        return real_update(run_id, **fields)

    runner.store.update_status = disk_full_at_the_end
    snapshot = _ended(runner, runner.submit(CONFIG))
    assert snapshot.state == RunState.FINISHED
    assert "status.json not updated" in snapshot.message and "No space left" in snapshot.message


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the exit ends the thread
def test_an_exit_inside_training_ends_the_run_and_a_later_submit_starts_a_new_worker(tmp_path, monkeypatch):
    def exits(self, sink, should_stop, on_checkpoint=None):
        raise SystemExit(3)

    monkeypatch.setattr(gaccum_core.execution.execute.Engine, "run", exits)
    runner = Runner(tmp_path)
    snapshot = _ended(runner, runner.submit(CONFIG))
    assert snapshot.state == RunState.FAILED and "SystemExit" in snapshot.message
    assert _status(runner, snapshot.run_id)["state"] == "failed"
    monkeypatch.undo()
    assert _ended(runner, runner.submit(CONFIG)).state == RunState.FINISHED


@pytest.mark.parametrize("state", list(RunState))
def test_every_state_is_a_plain_string_on_disk_and_in_json(state):
    assert json.loads(json.dumps({"state": state}))["state"] == state.value
    assert RunState(state.value) is state

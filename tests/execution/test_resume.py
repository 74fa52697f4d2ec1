"""Stop, kill, resume: a resumed run equals the uninterrupted run bit for bit, even stopped mid-window.

Two configs, 40 optimizer steps each: SGD with momentum + warm-up + cosine + clipping in fp32, and
AdamW in fp16 with a GradScaler whose scale grows every 3 clean steps from 2^20, so that skipped
steps and scale changes are in play. Each interrupted run must end with torch.equal parameters,
optimizer state and loss scale, and the very same loss and grad_norm columns, as the uninterrupted one.
A data-parallel job stopped and resumed: tests/train/test_distributed.py.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
import torch

from gaccum_core.train.checkpoint import CheckpointError
from gaccum_core.config import RunConfig
from gaccum_core.runs.integrity import DamagedRun
from gaccum_core.execution.resume import run_checkpoints
from gaccum_core.execution.runner import Runner
from gaccum_core.states import RunState
from workers import close_now

BASE = dict(model="mlp", dataset="digits", micro_batch_size=8, accum_steps=4, max_steps=40, device="cpu",
            eval_every=10)
SGD = RunConfig(**BASE, optimizer="sgd", momentum=0.9, lr=0.05, lr_schedule="cosine", warmup_steps=5,
                grad_clip=0.5)
FP16 = RunConfig(**BASE, optimizer="adamw", lr=3e-3, amp="fp16", init_scale=2.0**20, growth_interval=3)
# A language model: token-weighted windows, tokens_seen in the counters, a generated sample per evaluation.
GPT = RunConfig(model="gpt", dataset="pydoc", max_seq_len=32, micro_batch_size=4, accum_steps=4, max_steps=40,
                device="cpu", eval_every=10, optimizer="adamw", lr=1e-3)
CONFIGS = {"sgd_fp32": SGD, "adamw_fp16": FP16, "gpt_adamw": GPT}
WAIT_S = 300  # only so a broken run fails instead of hanging


def _ended(runner: Runner, run_id: str):
    snapshot = runner.wait(run_id, timeout=WAIT_S)
    assert snapshot.done, f"run {run_id} never ended"
    return snapshot


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """The uninterrupted run of each config."""
    runner = Runner(tmp_path_factory.mktemp("reference"))
    done = {name: runner.submit(config) for name, config in CONFIGS.items()}
    for run_id in done.values():
        assert _ended(runner, run_id).state == RunState.FINISHED
    return runner.store, done


def _assert_same_run(store, reference: str, resumed: str) -> None:
    """torch.equal parameters, optimizer state and scale; identical loss and grad_norm columns."""
    a, b = store.load_model(reference), resumed_store(resumed).load_model(resumed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ca, cb = run_checkpoints(store, reference).load(), run_checkpoints(resumed_store(resumed), resumed).load()
    for sa, sb in zip(ca["optimizer"]["state"].values(), cb["optimizer"]["state"].values()):
        assert all(torch.equal(torch.as_tensor(sa[k]), torch.as_tensor(sb[k])) for k in sa)
    assert ca["scaler"] == cb["scaler"] and ca["scheduler"] == cb["scheduler"]
    ma, mb = store.read_metrics(reference), resumed_store(resumed).read_metrics(resumed)
    assert mb["step"].tolist() == list(range(1, 41))  # each step once, no gaps
    for column in ("loss", "grad_norm", "scale", "skipped", "lr", "samples_seen", "tokens", "tokens_seen"):
        assert ma[column].equals(mb[column]), column
    assert store.read_evals(reference)["test_loss"].equals(resumed_store(resumed).read_evals(resumed)["test_loss"])
    assert store.samples(reference) == resumed_store(resumed).samples(resumed)  # each evaluation's text once


_STORES: dict = {}


def resumed_store(run_id: str):
    return _STORES[run_id]


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("stops", [[(7, 1)], [(10, 3)], [(5, 2), (18, 3), (31, 0)]],
                         ids=["mid_window", "window_boundary", "three_stops"])
def test_a_stopped_and_resumed_run_equals_the_uninterrupted_run(references, tmp_path, gate, name, stops):
    """Stopped mid-window (its gradients carried in the checkpoint), at a boundary, or three times."""
    store, done = references
    runner = Runner(tmp_path)
    run_id = None
    for step, micro in stops:
        gate.hold(step, micro)
        run_id = runner.submit(CONFIGS[name]) if run_id is None else runner.resume(run_id)
        gate.wait_until_held()
        runner.stop(run_id)
        gate.release()
        assert _ended(runner, run_id).state == RunState.STOPPED
        position = run_checkpoints(runner.store, run_id).load()["position"]
        done_micro = micro + 1  # the held micro-batch finishes; the stop is seen before the next
        assert position["micro"] == (done_micro % CONFIGS[name].accum_steps)
        assert len(run_checkpoints(runner.store, run_id).load()["in_flight"]) == position["micro"]
    runner.resume(run_id)
    assert _ended(runner, run_id).state == RunState.FINISHED
    _STORES[run_id] = runner.store
    _assert_same_run(store, done[name], run_id)
    segments = runner.store.read_status(run_id)["segments"]
    assert len(segments) == len(stops) + 1 and segments[-1]["to_step"] == 40


# The language run only: what a kill adds to a stop is a fresh process resuming from what the killed one wrote (the
# text data's order, the token counts, AdamW's moments); each config's state is checked by the stops above, and a
# killed dropout run by tests/train/test_dropout_reproducible.py.
@pytest.mark.multiprocess
@pytest.mark.parametrize("name", ["gpt_adamw"])
def test_a_sigkilled_worker_resumes_from_its_last_checkpoint_exactly(references, tmp_path, monkeypatch, name):
    """checkpoint_every=5, the worker SIGKILLed at a random step: resumed, rows beyond the checkpoint dropped."""
    store, done = references
    monkeypatch.setenv("GACCUM_FAULTS", ",".join(f"slow@{s}:0*0.05" for s in range(1, 41)))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # as the references here: bit-equality needs the same kernels
    # A worker per run, no warm spare: the one warmed after the resumed run would be killed at close mid-import.
    runner = Runner(tmp_path, executor="process", warm_spare=False)
    try:
        kill_after = random.Random().randint(6, 33)
        run_id = runner.submit(CONFIGS[name].replace(checkpoint_every=5))
        deadline = time.monotonic() + WAIT_S
        while len(runner.snapshot(run_id).metrics) < kill_after:
            assert time.monotonic() < deadline and not runner.snapshot(run_id).done
            time.sleep(0.01)
        os.kill(runner.worker_pid(run_id), signal.SIGKILL)
        assert _ended(runner, run_id).state == RunState.FAILED
        rows_before = len(runner.store.read_metrics(run_id))
        at = run_checkpoints(runner.store, run_id).load()["counters"]["step"]
        assert at % 5 == 0 and at <= rows_before, (at, rows_before)
        monkeypatch.delenv("GACCUM_FAULTS")
        runner.resume(run_id)
        assert _ended(runner, run_id).state == RunState.FINISHED, f"killed after {kill_after} steps"
    finally:
        runner.close()
    _STORES[run_id] = runner.store
    print(f"killed after {kill_after} rows ({rows_before} on disk), resumed from step {at}")
    _assert_same_run(store, done[name], run_id)


def test_a_torn_temporary_checkpoint_is_ignored(references, tmp_path, gate):
    """A kill during a save leaves .checkpoint.pt.*.tmp: resume reads checkpoint.pt and never the torn file."""
    store, done = references
    runner = Runner(tmp_path)
    gate.hold(12, 2)
    run_id = runner.submit(SGD)
    gate.wait_until_held()
    runner.stop(run_id)
    gate.release()
    _ended(runner, run_id)
    (runner.store.path(run_id) / ".checkpoint.pt.x1y2.tmp").write_bytes(b"PK\x03\x04 torn half of a zip")
    runner.resume(run_id)
    assert _ended(runner, run_id).state == RunState.FINISHED
    _STORES[run_id] = runner.store
    _assert_same_run(store, done["sgd_fp32"], run_id)


def test_what_cannot_resume_exactly_is_refused_with_a_message_naming_it(tmp_path, gate):
    """A changed setting, a damaged checkpoint, another torch, no checkpoint, a finished run not extended."""
    runner = Runner(tmp_path)
    finished = _ended(runner, runner.submit(SGD.replace(max_steps=3))).run_id
    with pytest.raises(CheckpointError, match="finished all its steps"):
        runner.resume(finished)
    path = runner.store.path(finished) / "config.json"
    path.write_text(path.read_text().replace('"lr": 0.05', '"lr": 0.1'))
    with pytest.raises(CheckpointError, match=r"settings changed.*lr: 0.05 -> 0.1"):
        runner.resume(finished, max_steps=6)
    path.write_text(path.read_text().replace('"lr": 0.1', '"lr": 0.05'))
    checkpoints = run_checkpoints(runner.store, finished)
    checkpoints.save({**checkpoints.load(), "torch_version": "1.13.0"})
    with pytest.raises(CheckpointError, match="torch 1.13.0"):
        runner.resume(finished, max_steps=6)
    runner.store.checkpoint_path(finished).write_bytes(b"not a checkpoint")
    with pytest.raises(DamagedRun, match="checkpoint.pt of run .* is not a torch checkpoint"):
        runner.resume(finished, max_steps=6)
    runner.store.checkpoint_path(finished).unlink()
    with pytest.raises(CheckpointError, match="no checkpoint.pt"):
        runner.resume(finished, max_steps=6)


def test_a_finished_run_extended_continues_and_records_the_change(tmp_path):
    """--max-steps larger: the run goes on from its last step; config.json's history names the change."""
    runner = Runner(tmp_path)
    run_id = _ended(runner, runner.submit(SGD.replace(max_steps=6, lr_schedule="constant", warmup_steps=0))).run_id
    runner.resume(run_id, max_steps=9)
    snapshot = _ended(runner, run_id)
    assert snapshot.state == RunState.FINISHED and snapshot.config.max_steps == 9
    assert runner.store.read_metrics(run_id)["step"].tolist() == list(range(1, 10))
    import json

    history = json.loads((runner.store.path(run_id) / "config.json").read_text())["history"]
    assert history[-1]["at_step"] == 6 and history[-1]["fields"] == {"max_steps": [6, 9]}
    assert runner.store.read_config(run_id).max_steps == 9


@pytest.mark.multiprocess
def test_a_run_stopped_in_a_worker_process_resumes_there_to_the_same_end(references, tmp_path, monkeypatch):
    """Stop and Resume with the dashboard's executor: the old stop request does not stop the resumed worker."""
    store, done = references
    monkeypatch.setenv("GACCUM_FAULTS", ",".join(f"slow@{s}:1*0.05" for s in range(1, 41)))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # as the references here: bit-equality needs the same kernels
    runner = Runner(tmp_path, executor="process")
    try:
        run_id = runner.submit(SGD)
        while len(runner.snapshot(run_id).metrics) < 8:
            assert not runner.snapshot(run_id).done
            time.sleep(0.01)
        runner.stop(run_id)
        assert _ended(runner, run_id).state == RunState.STOPPED
        runner.resume(run_id)
        snapshot = _ended(runner, run_id)
        assert snapshot.state == RunState.FINISHED, snapshot.message
        assert [row["step"] for row in snapshot.metrics] == list(range(1, 41))
    finally:
        close_now(runner)  # and the spare warmed after the resumed run
    _STORES[run_id] = runner.store
    _assert_same_run(store, done["sgd_fp32"], run_id)


def test_checkpoints_come_every_n_steps_and_once_at_the_end(tmp_path):
    """checkpoint_every=4 over 8 steps: saves after steps 4 and 8, the last one written once (after the final eval)."""
    from gaccum_core.train.engine import Engine
    from gaccum_core.train.metrics import NullSink

    saved = []
    engine = Engine(SGD.replace(max_steps=8, checkpoint_every=4, eval_every=0))
    engine.run(NullSink(), on_checkpoint=lambda state: saved.append(state["counters"]))
    assert [c["step"] for c in saved] == [4, 8] and saved[-1]["last_eval_step"] == 8


def test_a_checkpoint_on_an_epochs_last_step_resumes_with_each_evaluation_once(tmp_path):
    """Issue 19 #5: the periodic checkpoint at an epoch's last step is written before that epoch's
    evaluation; a run that dies after both and resumes from it redoes the evaluation, which must then
    replace the row it wrote, not add a second one (eval.csv read 45, 45, 90)."""
    from gaccum_core import faults
    from gaccum_core.runs.store import RunStore

    # digits' 1437 training images in windows of 16*2: 45 steps per epoch, a checkpoint every 45.
    config = RunConfig(model="mlp", micro_batch_size=16, accum_steps=2, epochs=2, eval_every=0,
                       checkpoint_every=45, device="cpu")
    runner = Runner(tmp_path, executor="thread")
    faults.arm(faults.Fault("error", step=50))
    try:
        run_id = runner.submit(config)
        assert runner.wait(run_id).state == RunState.FAILED
    finally:
        faults.disarm()
    store = RunStore(tmp_path)
    assert [r["step"] for r in store.eval_rows(run_id)] == [45]  # written after the step-45 checkpoint
    runner.resume(run_id)
    assert runner.wait(run_id).state == RunState.FINISHED
    assert [r["step"] for r in store.eval_rows(run_id)] == [45, 90]
    assert [r["step"] for r in store.metric_rows(run_id)] == list(range(1, 91))

"""Runs on a GPU as the dashboard runs them (issue 41): in worker processes, stopped and resumed bit-exact, out of
memory for real, two at once on two GPUs each on its own, activation checkpointing and FSDP2 over NCCL against the
one-big-batch run.

Marked `cuda`; skipped with the reason "no CUDA device" without one, and "needs 2 CUDA devices" for the two-GPU
tests. The runner watches its workers with psutil: where a GPU image lacks it, those tests are skipped saying so
(carry its wheel, see bench/gpu_check.py). No streamlit, no plotly, no scikit-learn (fake images and the bundled
pydoc corpus only)."""

from __future__ import annotations

import time

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.states import RunState
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]
two_gpus = pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() < 2,
                              reason="needs 2 CUDA devices")

WAIT_S = 600  # only so a broken run fails instead of hanging
BASE = RunConfig(model="mlp", dataset="fake", image_size=8, fake_samples=120, device="cuda", optimizer="sgd", lr=0.05,
                 momentum=0.9, epochs=1000, max_steps=30, eval_every=10, checkpoint_every=5)
# Each step sleeps 0.1 s (a "slow" fault the workers inherit): a run is still going when the test looks.
PACED = ",".join(f"slow@{step}:0*0.1" for step in range(1, 200))


@pytest.fixture
def runner(tmp_path, monkeypatch):
    """A runner training in worker processes (the dashboard's executor), closed after the test."""
    pytest.importorskip("psutil", reason="the runner watches its workers with psutil, not installed here")
    from gaccum_core.execution.runner import Runner  # noqa: PLC0415 - only with psutil

    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS's reductions the same in every worker
    made = Runner(tmp_path / "runs", executor="process", warm_spare=False)
    yield made
    made.close()


def _ended(runner, run_id: str):
    snapshot = runner.wait(run_id, timeout=WAIT_S)
    assert snapshot.done, f"run {run_id} never ended"
    return snapshot


def _weights(runner, run_id: str) -> torch.Tensor:
    return torch.cat([t.flatten().float() for t in runner.store.load_model(run_id).values()])


def test_a_worker_process_run_stopped_and_resumed_on_cuda_equals_the_uninterrupted_run(runner, monkeypatch):
    """fp16 with a GradScaler (its scale and skipped steps in the checkpoint), momentum, a partial last window
    each epoch (120 samples in windows of 32): stopped at step 8 or later, resumed, torch.equal at step 30."""
    config = BASE.replace(micro_batch_size=8, accum_steps=4, amp="fp16", init_scale=2.0**16, growth_interval=3)
    whole = runner.submit(config)
    assert _ended(runner, whole).state == RunState.FINISHED
    monkeypatch.setenv("GACCUM_FAULTS", PACED)  # the next worker starts now, with it
    stopped = runner.submit(config)
    while len(runner.snapshot(stopped).metrics) < 8:
        assert not runner.snapshot(stopped).done, runner.snapshot(stopped).message
        time.sleep(0.05)
    runner.stop(stopped)
    assert _ended(runner, stopped).state == RunState.STOPPED
    monkeypatch.setenv("GACCUM_FAULTS", "")
    runner.resume(stopped)
    resumed = _ended(runner, stopped)
    assert resumed.state == RunState.FINISHED, resumed.message
    assert [row["step"] for row in resumed.metrics] == list(range(1, 31))
    a, b = runner.store.load_model(whole), runner.store.load_model(stopped)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "the resumed run's weights differ"
    assert runner.store.read_metrics(whole)["loss"].equals(runner.store.read_metrics(stopped)["loss"])


FACTORY = '''
import torch
import torch.nn as nn


def wide(input_shape, num_classes):
    """A hidden layer so wide that a micro-batch of 4096 needs 1.2x the GPU's memory for it alone."""
    total = torch.cuda.get_device_properties(0).total_memory
    width = int(total * 1.2 / (4096 * 4))
    features = input_shape[0] * input_shape[1] * input_shape[2]
    return nn.Sequential(nn.Flatten(), nn.Linear(features, width), nn.ReLU(), nn.Linear(width, num_classes))
'''


def test_a_worker_process_out_of_memory_fails_with_the_advice_and_the_next_run_trains(runner, tmp_path,
                                                                                        monkeypatch):
    """Out of memory for real in a worker process (the dashboard's executor; tests/cuda/test_cuda_memory.py caps
    the allocator of this process instead): the run fails naming its micro-batch and the way out, and the next
    run on the same GPU trains (the failed worker's memory went with it)."""
    (tmp_path / "wide_models.py").write_text(FACTORY)
    monkeypatch.setenv("GACCUM_USER_CODE", str(tmp_path))
    config = BASE.replace(model=f"{tmp_path / 'wide_models.py'}:wide", fake_samples=4096, max_steps=1,
                          eval_every=10**9, checkpoint_every=0)
    failed = _ended(runner, runner.submit(config.replace(micro_batch_size=4096, accum_steps=1)))
    assert failed.state == RunState.FAILED
    assert "out of memory at micro_batch_size=4096" in failed.message and "accum_steps" in failed.message
    after = _ended(runner, runner.submit(BASE.replace(micro_batch_size=8, accum_steps=2, max_steps=2)))
    assert after.state == RunState.FINISHED, after.message


@two_gpus
def test_two_runs_on_two_gpus_train_at_once_each_on_its_own(runner, monkeypatch):
    """cuda:0 and cuda:1 each have a queue of their own: the two runs are running at the same time, and each one's
    memory columns are its own GPU's."""
    monkeypatch.setenv("GACCUM_FAULTS", PACED)
    ids = [runner.submit(BASE.replace(device=f"cuda:{gpu}", micro_batch_size=8, accum_steps=2, max_steps=60))
           for gpu in (0, 1)]
    deadline = time.monotonic() + WAIT_S
    while not all(runner.snapshot(i).state == RunState.RUNNING and runner.snapshot(i).metrics for i in ids):
        assert time.monotonic() < deadline and not any(runner.snapshot(i).done for i in ids), \
            [(runner.snapshot(i).state, runner.snapshot(i).message) for i in ids]
        time.sleep(0.05)
    for run_id in ids:
        runner.stop(run_id)
        assert _ended(runner, run_id).state == RunState.STOPPED


@two_gpus
def test_a_two_gpu_job_on_auto_holds_both_gpus_and_a_run_on_cuda_1_waits_for_it(runner, monkeypatch):
    """A data-parallel job on auto trains on cuda:0 and cuda:1: a one-process run set to cuda:1 waits in the queue
    until the job ends, never training beside its rank 1."""
    monkeypatch.setenv("GACCUM_FAULTS", PACED)
    job = runner.submit(BASE.replace(device="auto", nproc=2, micro_batch_size=8, accum_steps=2, max_steps=40))
    deadline = time.monotonic() + WAIT_S
    while not runner.snapshot(job).metrics:
        assert time.monotonic() < deadline and not runner.snapshot(job).done, runner.snapshot(job).message
        time.sleep(0.05)
    single = runner.submit(BASE.replace(device="cuda:1", micro_batch_size=8, accum_steps=2, max_steps=2))
    while not runner.snapshot(job).done:
        assert runner.snapshot(single).state == RunState.QUEUED, "the run on cuda:1 started beside the job's rank 1"
        time.sleep(0.05)
    assert _ended(runner, single).state == RunState.FINISHED


def _trained(config: RunConfig) -> torch.Tensor:
    engine = Engine(config)
    engine.run(RowKeeper())
    return torch.cat([p.detach().flatten().float().cpu() for p in engine.model.parameters()])


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_activation_checkpointing_on_cuda_accumulates_the_one_big_batch(mode):
    """gpt tiny on pydoc, fp32: checkpointed at b=4, k=4 against b=16, k=1 without checkpointing (the recomputed
    forward and the accumulation both exact), 8 steps of AdamW at its usual rate."""
    base = RunConfig(model="gpt", dataset="pydoc", max_seq_len=32, device="cuda", optimizer="adamw", lr=1e-3,
                     max_steps=8, eval_every=10**9, checkpoint_every=0)
    accumulated = _trained(base.replace(micro_batch_size=4, accum_steps=4, activation_checkpointing=mode))
    big = _trained(base.replace(micro_batch_size=16, accum_steps=1))
    delta = (accumulated - big).abs().max().item()
    print(f"\nfigure: max |Δ| {delta:.1e} (checkpointing {mode}, b=4 k=4 against b=16 k=1, fp32)")
    assert delta <= 1e-5


@two_gpus
def test_fsdp2_over_nccl_trains_the_one_process_parameters(runner):
    """Two ranks sharded with FSDP2 over NCCL (b=4, k=4 each, 118 samples: partial last windows) against one
    process at b=8, k=4 on cuda:0: the same parameters within 1e-5."""
    base = BASE.replace(fake_samples=118, epochs=2, max_steps=0, eval_every=10**9, checkpoint_every=0, momentum=0.9)
    sharded = _ended(runner, runner.submit(base.replace(device="auto", nproc=2, sharding="fsdp", micro_batch_size=4,
                                                        accum_steps=4)))
    assert sharded.state == RunState.FINISHED, sharded.message
    one = _ended(runner, runner.submit(base.replace(device="cuda:0", micro_batch_size=8, accum_steps=4)))
    assert one.state == RunState.FINISHED, one.message
    delta = (_weights(runner, sharded.run_id) - _weights(runner, one.run_id)).abs().max().item()
    print(f"\nfigure: max |Δ| {delta:.1e} (FSDP2 over NCCL, 2 ranks, against 1 process)")
    assert delta <= 1e-5


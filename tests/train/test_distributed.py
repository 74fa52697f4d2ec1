"""Data-parallel runs (gloo on the CPU, 2 processes) against single-process oracles.

Two processes with micro-batches of b = 4 must train the very parameters one process trains with
b = 8 (same k) and with one batch of b*k*2 = 32 (k = 1), partial last windows and empty rank shares
included. The configs the oracles and counts read, and the uninterrupted run a stopped job resumes to, are
trained one after the other in one spawned pair of ranks, shared between the tests that read them; model.pt and
the endings are torchrun jobs of the runner; the single-process references train here, in the test process.
"""

from __future__ import annotations

import time

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.models.build import build_seeded_model
from gaccum_core.execution.resume import run_checkpoints
from gaccum_core.states import RunState
from gaccum_core.train.distributed import Ranks, share
from records_data import pg, records, rollouts, sft  # noqa: F401  (the records and rollouts fixtures)
from jobs import (ATOL, RTOL, WAIT_S, WORLD, assert_matches_references, assert_none_survive, job_processes,
                  last_windows, max_diff, one_process_references, reference, runner_with_faults, spawned_runs,
                  stop_and_assert_stopped, wait_for_rows)

pytestmark = pytest.mark.multiprocess

B, K = 4, 4
# 118 samples, global windows of WORLD*B*K = 32: three full windows, then a partial one of 22
# samples (global micro-batches of 8, 8 and 6: rank 1 gets 4, 4 and 2 of them, never nothing).
PARTIAL = RunConfig(model="mlp", dataset="fake", image_size=8, fake_samples=118, fake_classes=10,
                    micro_batch_size=B, accum_steps=K, nproc=WORLD, epochs=2, device="cpu")
SGD = PARTIAL.replace(optimizer="sgd", lr=0.05, momentum=0.9)
# AdamW's update m/(sqrt(v)+eps) turns float rounding in gradients that cancel to ~eps into changes of
# ~lr: at lr=1e-2 the two 1-process references below already differ by 1.8e-5 from each other (in one
# process, no DDP), at lr=1e-3 by 1.8e-6. The usual AdamW lr keeps that spread below the tolerance.
ADAMW = PARTIAL.replace(optimizer="adamw", lr=1e-3, weight_decay=0.01)
# 100 samples: the last window of each epoch holds 4 samples, one global micro-batch [96, 100)
# whose 8 slots rank 0 fills with 4 samples and leaves rank 1 nothing.
EMPTY_SHARE = SGD.replace(fake_samples=100)
SYNC_EVERY = SGD.replace(sync_every_micro_batch=True)
ONE_PER_STEP = SGD.replace(accum_steps=1, max_steps=3)  # one backward per step: one pass over the buckets


# --- 1, 2: the oracles -------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [SGD, ADAMW], ids=["sgd_momentum", "adamw"])
def test_two_processes_equal_one_process_with_a_partial_last_window(runs, config):
    """2 processes (b=4, k=4) train the parameters of 1 process (b=8, k=4) and (b=32, k=1), partial last windows included."""
    last = last_windows(config)
    # The last window is partial, and every rank has samples in each of its micro-batches.
    assert last.samples < config.effective_batch_size
    for micro in last.micro_batches:
        for rank in range(WORLD):
            start, stop = share(micro, Ranks(rank, WORLD), config.micro_batch_size)
            assert stop > start
    job = runs[config]
    per_epoch = job.metrics.groupby("epoch")["samples"].last()
    assert len(per_epoch) == config.epochs
    assert (per_epoch == last.samples).all() and (per_epoch < config.effective_batch_size).all()
    assert_matches_references(job)


def test_two_processes_equal_one_process_when_a_rank_has_nothing_in_the_last_window(runs):
    """A last window that leaves rank 1 no sample (it still joins the all-reduce) trains the 1-process parameters."""
    config = EMPTY_SHARE
    last = last_windows(config)
    assert last.samples < config.effective_batch_size
    assert len(last.micro_batches) == 1
    (micro,) = last.micro_batches
    rank0 = share(micro, Ranks(0, WORLD), config.micro_batch_size)
    rank1 = share(micro, Ranks(1, WORLD), config.micro_batch_size)
    assert rank0[1] - rank0[0] == last.samples > 0
    assert rank1[0] == rank1[1]  # empty
    job = runs[config]
    assert job.metrics.groupby("epoch")["samples"].last().tolist() == [last.samples] * config.epochs
    assert_matches_references(job)


# --- 3: all-reduce counts --------------------------------------------------------------------------


def _param_bytes(config: RunConfig) -> int:
    data = load_data(config)
    model = build_seeded_model(config, data.input_shape, data.num_classes)
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def test_no_sync_all_reduces_once_per_window_and_sync_every_once_per_micro_batch(runs):
    """no_sync: one pass over the buckets per step (as k=1) carrying the parameter bytes; sync_every: one per micro-batch."""
    param_bytes = _param_bytes(SGD)
    one = runs[ONE_PER_STEP].metrics
    per_pass = one["allreduce_calls"].iloc[0]
    assert per_pass >= 1
    assert (one["allreduce_calls"] == per_pass).all()
    assert (one["allreduce_bytes"] == param_bytes).all()

    no_sync = runs[SGD].metrics
    sync = runs[SYNC_EVERY].metrics
    for metrics in (one, no_sync, sync):
        assert (metrics["world_size"] == WORLD).all()
    assert (no_sync["micro_batches"] == K).any() and (no_sync["micro_batches"] < K).any()
    assert (no_sync["allreduce_calls"] == per_pass).all()
    assert (no_sync["allreduce_bytes"] == param_bytes).all()

    assert sync["micro_batches"].tolist() == no_sync["micro_batches"].tolist()
    assert (sync["allreduce_calls"] == per_pass * sync["micro_batches"]).all()
    assert (sync["allreduce_bytes"] == param_bytes * sync["micro_batches"]).all()
    full, partial = sync[sync["micro_batches"] == K], sync[sync["micro_batches"] < K]
    assert (full["allreduce_calls"] == K * per_pass).all() and len(full) > 0 and len(partial) > 0
    print(f"\nparam bytes {param_bytes}; calls/bytes per step: k=1 {one['allreduce_calls'].tolist()}"
          f"/{one['allreduce_bytes'].tolist()}; no_sync {no_sync['allreduce_calls'].tolist()}"
          f"/{no_sync['allreduce_bytes'].tolist()}; sync_every {sync['allreduce_calls'].tolist()}"
          f"/{sync['allreduce_bytes'].tolist()} (micro_batches {sync['micro_batches'].tolist()})")


def test_syncing_every_micro_batch_trains_the_same_parameters(runs):
    """sync_every_micro_batch changes only the communication: the parameters still equal the 1-process references."""
    assert_matches_references(runs[SYNC_EVERY])


# --- 4, 5: endings ---------------------------------------------------------------------------------


def test_a_failing_rank_fails_the_run_with_its_message_and_leaves_no_process(make_runner, monkeypatch):
    """An error on rank 1 ends the whole job as failed with rank 1's message, and every process of it exits."""
    # Rank 1 only: a 3 s pause before step 2 (so the processes are seen running), then an error at step 3.
    monkeypatch.setenv("GACCUM_FAULTS", "slow@2:0*3,error@3")
    monkeypatch.setenv("GACCUM_FAULTS_RANK", "1")
    runner = make_runner()
    run_id = runner.submit(SGD)
    procs = job_processes(runner, run_id)
    wait_for_rows(runner, run_id, rows=2)  # step 3, the failing one, starts right after step 2's row
    started = time.monotonic()
    snapshot = runner.wait(run_id, timeout=WAIT_S)
    print(f"\nfailed run ended {time.monotonic() - started:.1f} s after step 2's row was seen: {snapshot.message!r}")
    assert snapshot.done, f"the job did not end within {WAIT_S} s of a rank failing"
    assert snapshot.state == RunState.FAILED
    assert "rank 1" in snapshot.message and "injected fault" in snapshot.message, snapshot.message
    assert runner.store.read_status(run_id)["state"] == "failed"
    assert [row["step"] for row in snapshot.metrics] == [1, 2]  # steps before the fault, none after
    assert_none_survive(procs)


def test_a_stop_the_ranks_cannot_agree_on_in_time_kills_every_rank_and_keeps_the_rows(make_runner, monkeypatch):
    """A stop ends every rank, as 'stopped' with gap-free rows, by a kill after the grace when a rank cannot
    reach a step's end (a stop agreed at a step's end: see the resume test below)."""
    monkeypatch.delenv("GACCUM_FAULTS_RANK", raising=False)  # both ranks
    # Step 2 pauses 120 s on both ranks, so the stop (checked at a step's end) cannot be agreed in time.
    monkeypatch.setenv("GACCUM_FAULTS", "slow@2:0*120")
    runner = make_runner()
    run_id = runner.submit(SGD)
    procs = job_processes(runner, run_id)
    wait_for_rows(runner, run_id)
    assert not runner.snapshot(run_id).done
    stop_and_assert_stopped(runner, run_id, procs, killed=True)


# 24 steps of SGD with momentum, warm-up, cosine decay and clipping, on digits: what stops and resumes below.
RESUMED = RunConfig(model="mlp", dataset="digits", micro_batch_size=B, accum_steps=K, nproc=WORLD, max_steps=24,
                    device="cpu", eval_every=10, optimizer="sgd", momentum=0.9, lr=0.05, lr_schedule="cosine",
                    warmup_steps=5, grad_clip=0.5)


@pytest.fixture(scope="module")
def stopped_then_resumed(tmp_path_factory):
    """RESUMED as a torchrun job of the runner, stopped mid-run (asserted stopped, not killed, with gap-free rows,
    no process left) and resumed to its end: the runner, the run's id and the step its checkpoint held."""
    # Every step pauses 0.2 s on both ranks: long enough to stop mid-run. The ranks agree within a step;
    # torchrun and its ranks then take ~3.5 s (up to 6 s under load) to exit, past the default 5 s grace,
    # which a job that already wrote its final state does not get killed for.
    paced = ",".join(f"slow@{s}:0*0.2" for s in range(1, 25))
    with runner_with_faults(tmp_path_factory.mktemp("stopped_runs"), paced) as (runner, patch):
        run_id = runner.submit(RESUMED)
        procs = job_processes(runner, run_id)
        wait_for_rows(runner, run_id, rows=5, timeout=WAIT_S)
        assert not runner.snapshot(run_id).done, runner.snapshot(run_id).message
        stop_and_assert_stopped(runner, run_id, procs, killed=False)
        stopped_at = run_checkpoints(runner.store, run_id).load()["counters"]["step"]
        patch.delenv("GACCUM_FAULTS")
        runner.resume(run_id)
        assert runner.wait(run_id, timeout=WAIT_S).state == RunState.FINISHED
        yield runner, run_id, stopped_at


def test_a_stop_agreed_by_every_rank_keeps_the_rows_and_resumes_to_the_uninterrupted_runs_end(runs,
                                                                                            stopped_then_resumed):
    """A stop ends every rank at a step's end they agree on, as 'stopped' (not killed) with gap-free rows;
    resumed, every rank takes rank 0's checkpoint and the job ends bit-equal to the same job never stopped
    (trained by the spawned ranks, on the engine the job's ranks run)."""
    runner, run_id, stopped_at = stopped_then_resumed
    assert 5 <= stopped_at < 24
    uninterrupted = runs[RESUMED]
    a, b = uninterrupted.model, runner.store.load_model(run_id)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ma, mb = uninterrupted.metrics, runner.store.read_metrics(run_id)
    assert mb["step"].tolist() == list(range(1, 25))
    assert ma["loss"].equals(mb["loss"]) and ma["grad_norm"].equals(mb["grad_norm"])


# --- 6: the saved model ----------------------------------------------------------------------------


def test_a_two_process_model_loads_into_a_plain_single_process_model(stopped_then_resumed):
    """model.pt of a 2-process run (the resumed run of the resume test: one torchrun job for both) loads
    strictly into the plain model and computes the 1-process reference's logits."""
    runner, run_id, _ = stopped_then_resumed
    saved = runner.store.load_model(run_id)
    assert not any(key.startswith("module.") for key in saved)
    data = load_data(RESUMED)
    model = build_seeded_model(RESUMED, data.input_shape, data.num_classes)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(saved, strict=True)
    assert max_diff(model.state_dict(), before) > 100 * ATOL  # the load replaced the initial weights

    expected = build_seeded_model(RESUMED, data.input_shape, data.num_classes)
    expected.load_state_dict(reference(RESUMED.replace(nproc=1, micro_batch_size=WORLD * B))[0])
    x, _ = data.test.batch(torch.arange(len(data.test)))
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected(x), atol=ATOL, rtol=RTOL)


# --- language models: token-weighted across ranks ------------------------------------------------------


@pytest.fixture(scope="module")
def text_config(tmp_path_factory):
    """gpt (tiny) on a small text file: sequences of different lengths, so ranks' shares hold different
    token counts; 2 processes with b=2, k=2 and a partial last window."""
    path = tmp_path_factory.mktemp("text") / "notes.txt"
    path.write_text("\n\n".join(f"Note {i}. " + "the quick brown fox jumps " * (1 + (7 * i) % 11) for i in range(20)),
                    encoding="utf-8")
    config = RunConfig(model="gpt", dataset="text", text_file=str(path), max_seq_len=24, micro_batch_size=2,
                       accum_steps=2, nproc=WORLD, epochs=1, device="cpu", optimizer="sgd", lr=0.05)
    assert len(load_data(config).train) % config.effective_batch_size  # the last window is partial
    return config


@pytest.fixture(scope="module")
def sft_configs(records):
    """sft records (test_sft_oracle's: short, long, one left without completion tokens) aggregated by each sequence
    mode, padded and packed, 2 processes with b=2, k=2: ranks' shares hold different records and a partial window."""
    base = sft(records, nproc=WORLD, micro_batch_size=2, accum_steps=2, lr=0.1)
    return [base.replace(loss_agg=mode, packing=packing) for mode, packing in
            (("seq-mean-token-mean", "off"), ("seq-mean-token-sum", "on"), ("seq-mean-token-sum-norm", "off"))]


@pytest.fixture(scope="module")
def pg_config(rollouts):
    """pg rollouts (test_pg_oracle's: groups of 6, 6, 4 and 4) aggregated by group-mean-token-mean, 2 processes with
    b=3, k=2: windows of 12 and 8 records, the last micro-batch's shares uneven, groups split across ranks."""
    return pg(rollouts, nproc=WORLD, micro_batch_size=3, accum_steps=2)


def test_two_processes_aggregate_pg_rollouts_by_group_as_one_process_does(runs, pg_config):
    """Each rank weighs its share's tokens by -A·log p over its group's tokens, counted from the whole window: the
    job trains the one-process parameters and logs the same loss."""
    assert_matches_references(runs[pg_config])


@pytest.fixture(scope="module")
def runs(text_config, sft_configs, pg_config, tmp_path_factory):
    """Every config the oracles and the all-reduce counts read, trained one after the other by one spawned pair of
    ranks (one start, not a torchrun job each): the runs by config."""
    configs = [SGD, ADAMW, EMPTY_SHARE, ONE_PER_STEP, SYNC_EVERY, text_config, *sft_configs, pg_config, RESUMED]
    return spawned_runs(configs, tmp_path_factory.mktemp("ddp_ranks"))


def test_two_processes_aggregate_sft_records_as_one_process_does_in_every_sequence_mode(runs, sft_configs):
    """Each rank weighs its share's tokens from the whole window's records (no collective): the job trains the
    parameters of 1 process (b=4, k=2) and (b=8, k=1) and logs their aggregated loss, in each mode."""
    for config in sft_configs:
        assert_matches_references(runs[config])


def test_two_processes_weight_tokens_as_one_process_does(runs, text_config):
    """Each rank divides its summed token loss by 1/N of the global window's target tokens: the job trains
    the parameters of 1 process (b=4, k=2) and (b=8, k=1), and counts the same tokens per step."""
    job = runs[text_config]
    lengths = load_data(text_config).train.targets
    assert lengths.min() < lengths.max()  # micro-batches really hold different token counts
    assert_matches_references(job)
    for config in one_process_references(text_config).values():
        _, rows = reference(config)
        assert job.metrics["tokens"].tolist() == [r["tokens"] for r in rows]
    assert job.metrics["tokens_seen"].iloc[-1] == lengths.sum().item()

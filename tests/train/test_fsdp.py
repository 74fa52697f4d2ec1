"""FSDP2 sharding (gloo on the CPU, 2 processes) against single-process oracles: the oracles, counts, fp16 and the
uninterrupted run of the resume test run one after the other in one spawned pair of ranks; model.pt and the
endings are torchrun jobs of the runner.

Two sharded processes with micro-batches of b = 4 must train the parameters one process trains with b = 8
(same k) and with one batch per window, in every sync mode and reshard setting, partial last windows and an
empty rank share included; the collectives and the gradient memory kept between micro-batches are counted;
a stopped or killed sharded run resumes bit-exact from its DCP checkpoint.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.models.build import build_seeded_model
from gaccum_core.execution.resume import run_checkpoints
from gaccum_core.execution.runner import Runner
from gaccum_core.states import RunState
from gaccum_core.train.checkpoint import SHARDS_DIR
from gaccum_core.train.fsdp import blocks
from gaccum_core.train.memory import MB
from hfmodels import saved_model
from records_data import pg, records, rollouts, sft  # noqa: F401  (the records and rollouts fixtures)
from jobs import (ATOL, RTOL, WAIT_S, WORLD, assert_matches_references, assert_none_survive, job_processes,
                  last_windows, max_diff, one_process_references, reference, runner_with_faults, spawned_runs,
                  stop_and_assert_stopped, wait_for_rows)
from spawned import run_ranks

pytestmark = pytest.mark.multiprocess

B, K = 4, 4
# 118 samples, global windows of 2*4*4 = 32: three full windows, then one of 22 (global micro-batches 8, 8, 6).
BASE = RunConfig(model="mlp", dataset="fake", image_size=8, fake_samples=118, fake_classes=10, micro_batch_size=B,
                 accum_steps=K, nproc=WORLD, epochs=2, device="cpu", optimizer="sgd", lr=0.05, momentum=0.9,
                 sharding="fsdp")
# Each run costs seconds, so two of the four modes carry a second case each: AdamW (at its usual lr,
# which keeps float rounding in near-zero gradients below the tolerance, see test_distributed), and 100 samples,
# whose epochs each end in one global micro-batch of 4 samples, all rank 0's: rank 1's share is empty.
_CASES = {("every", "on"): {}, ("every", "off"): dict(optimizer="adamw", lr=1e-3, weight_decay=0.01),
          ("last", "on"): {}, ("last", "off"): dict(fake_samples=100)}
MODES = {f"{sync}-reshard_{reshard}": BASE.replace(fsdp_sync=sync, fsdp_reshard_after_backward=reshard, **case)
         for (sync, reshard), case in _CASES.items()}
ADAMW = MODES["every-reshard_off"]
EMPTY_SHARE = MODES["last-reshard_off"]


def _param_bytes(config: RunConfig) -> int:
    data = load_data(config)
    model = build_seeded_model(config, data.input_shape, data.num_classes)
    return sum(p.numel() * p.element_size() for p in model.parameters())


# --- the oracles -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(MODES))
def test_every_sync_mode_and_reshard_setting_trains_the_one_process_parameters(runs, mode):
    """fsdp_sync every/last × reshard after backward on/off: 2 sharded processes train the parameters and
    log the losses and gradient norms of 1 process (b=8, k=4) and (b=32, k=1), partial last windows included
    (SGD with momentum, and AdamW with every and reshard off)."""
    config = MODES[mode]
    assert last_windows(config).samples < config.effective_batch_size  # each epoch ends in a partial window
    job = runs[config]
    assert (job.metrics["world_size"] == WORLD).all()
    diffs = assert_matches_references(job)
    assert max(diffs.values()) <= ATOL


def test_adamw_keeps_each_ranks_part_of_its_moments(runs):
    """AdamW's state is sharded: each rank holds half of its two moments (and a step count per parameter)."""
    whole = _param_bytes(ADAMW) / MB
    optimizer_mb = runs[ADAMW].metrics["optimizer_mb"]
    assert ADAMW.optimizer == "adamw"
    assert optimizer_mb.tolist() == pytest.approx([2 * whole / WORLD] * len(optimizer_mb), rel=0.01)


def test_a_rank_with_an_empty_share_takes_part_and_the_parameters_still_match(runs):
    """A last window with nothing for rank 1 (it runs forward and backward on zero samples, joining every
    all-gather and reduce-scatter) trains the one-process parameters."""
    (micro,) = last_windows(EMPTY_SHARE).micro_batches
    assert micro.size <= B  # all of it in rank 0's share
    job = runs[EMPTY_SHARE]
    assert job.metrics.groupby("epoch")["samples"].last().tolist() == [micro.size] * EMPTY_SHARE.epochs
    assert_matches_references(job)  # the same run as its mode's oracle


# --- collectives and the gradient memory kept between micro-batches -----------------------------------------


def test_reduce_scatters_per_step_are_the_units_with_last_and_units_times_micro_batches_with_every(runs):
    """fsdp_sync last: one reduce-scatter per FSDP unit with parameters per step, carrying the whole gradient;
    every: that times the step's micro-batches. DDP's all-reduce is not used at all."""
    data = load_data(BASE)
    model = build_seeded_model(BASE, data.input_shape, data.num_classes)
    units = sum(1 for m in blocks(model) if next(m.parameters(), None) is not None)
    assert units == 3  # the mlp's three Linear layers; its root holds no parameter of its own
    param_bytes = _param_bytes(BASE)
    last = runs[MODES["last-reshard_on"]].metrics
    every = runs[MODES["every-reshard_on"]].metrics
    assert (last["micro_batches"] == K).any() and (last["micro_batches"] < K).any()
    assert (last["reduce_scatter_calls"] == units).all()
    assert (last["reduce_scatter_bytes"] == param_bytes).all()
    assert (every["reduce_scatter_calls"] == units * every["micro_batches"]).all()
    assert (every["reduce_scatter_bytes"] == param_bytes * every["micro_batches"]).all()
    for metrics in (last, every):
        assert (metrics["allreduce_calls"] == 0).all() and (metrics["all_gather_calls"] > 0).all()
    print(f"\nreduce-scatters per step: last {last['reduce_scatter_calls'].tolist()}, "
          f"every {every['reduce_scatter_calls'].tolist()} (micro-batches {every['micro_batches'].tolist()})")


def test_keeping_gathered_weights_between_micro_batches_saves_all_gathers(runs):
    """Reshard after backward off: a window's later forwards find their weights gathered, so fewer all-gathers
    per step than with it on, and the weights kept show in the rank's counted weights."""
    for sync in ("every", "last"):
        on, off = runs[MODES[f"{sync}-reshard_on"]].metrics, runs[MODES[f"{sync}-reshard_off"]].metrics
        # Full windows: a window of one micro-batch has no "between" (its only backward reshards).
        on, off = on[on["micro_batches"] == K], off[off["micro_batches"] == K]
        assert len(on) and len(off)
        assert off["all_gather_calls"].max() < on["all_gather_calls"].min()
        assert off["weights_mb"].min() > on["weights_mb"].max()
        print(f"\n{sync}: all-gathers per step, reshard on {on['all_gather_calls'].median():g}, "
              f"off {off['all_gather_calls'].median():g}; weights MB on {on['weights_mb'].iloc[0]:.4f}, "
              f"off {off['weights_mb'].iloc[0]:.4f}")


def test_a_rank_keeps_half_the_gradient_with_every_and_all_of_it_with_last(runs):
    """grad_kept_mb: 1/N of the fp32 gradient with every (reduce-scattered after each micro-batch), the whole
    of it with last (accumulated unsharded until the window's last micro-batch)."""
    whole = _param_bytes(BASE) / MB
    every = runs[MODES["every-reshard_on"]].metrics["grad_kept_mb"]
    last = runs[MODES["last-reshard_on"]].metrics["grad_kept_mb"]
    assert every.tolist() == pytest.approx([whole / WORLD] * len(every), rel=0.02)
    assert last.tolist() == pytest.approx([whole] * len(last), rel=1e-6)
    print(f"\ngrad_kept_mb: every {every.iloc[0]:.4f}, last {last.iloc[0]:.4f}; the whole gradient {whole:.4f} MB")


# --- the saved model ---------------------------------------------------------------------------------


def test_a_sharded_runs_model_pt_is_the_whole_state_dict_of_a_plain_model(stopped_killed_resumed):
    """model.pt holds full, unsharded tensors that load strictly into a one-process model and compute the
    one-process reference's logits (the run of the resume test below, resumed to its end: one job for both)."""
    config = RESUMED
    runner, run_id, _, _ = stopped_killed_resumed
    saved = runner.store.load_model(run_id)
    data = load_data(config)
    model = build_seeded_model(config, data.input_shape, data.num_classes)
    assert {k: v.shape for k, v in saved.items()} == {k: v.shape for k, v in model.state_dict().items()}
    model.load_state_dict(saved, strict=True)
    single = next(iter(one_process_references(config).values()))
    expected = build_seeded_model(single, data.input_shape, data.num_classes)
    expected.load_state_dict(reference(single)[0])
    x, _ = data.test.batch(torch.arange(len(data.test)))
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected(x), atol=ATOL, rtol=RTOL)


# --- language models: token-weighted across ranks ------------------------------------------------------


@pytest.fixture(scope="module")
def text_config(tmp_path_factory):
    """gpt (tiny) sharded per block on a small text file whose sequences differ in length: ranks' shares hold
    different token counts; 2 processes, b=2, k=2, a partial last window, gradients synced on the last only."""
    path = tmp_path_factory.mktemp("text") / "notes.txt"
    path.write_text("\n\n".join(f"Note {i}. " + "the quick brown fox jumps " * (1 + (7 * i) % 11) for i in range(20)),
                    encoding="utf-8")
    config = RunConfig(model="gpt", dataset="text", text_file=str(path), max_seq_len=24, micro_batch_size=2,
                       accum_steps=2, nproc=WORLD, epochs=1, device="cpu", optimizer="sgd", lr=0.05,
                       sharding="fsdp", fsdp_sync="last")
    assert len(load_data(config).train) % config.effective_batch_size  # the last window is partial
    return config


def test_sharded_gpt_weights_tokens_across_ranks_as_one_process_does(runs, text_config):
    """Each rank divides its summed token loss by 1/N of the window's target tokens over all ranks: the sharded
    gpt trains the one-process parameters and counts the same tokens; each block is a unit of its own."""
    job = runs[text_config]
    assert_matches_references(job)
    for config in one_process_references(text_config).values():
        assert job.metrics["tokens"].tolist() == [r["tokens"] for r in reference(config)[1]]
    data = load_data(text_config)
    model = build_seeded_model(text_config, data.input_shape, data.num_classes)
    # Every block, and the root with the embeddings, head and final norm.
    assert (job.metrics["reduce_scatter_calls"] == len(model.blocks) + 1).all()


@pytest.fixture(scope="module")
def llama_config(text_config, tmp_path_factory):
    """The text run on an hf: model (a tiny Llama saved with save_pretrained), AdamW, gathered weights kept."""
    return text_config.replace(model=f"hf:{saved_model(tmp_path_factory, 'llama')}", optimizer="adamw", lr=1e-3,
                               fsdp_reshard_after_backward="off")


def test_a_sharded_hf_llama_shards_its_decoder_layers_and_trains_the_one_process_parameters(runs, llama_config):
    """An hf: model is sharded per decoder layer (its _no_split_modules), then the root; AdamW over 2 ranks
    trains the one-process parameters."""
    config = llama_config
    data = load_data(config)
    model = build_seeded_model(config, data.input_shape, data.num_classes)
    layers = blocks(model)
    assert layers and all(type(layer).__name__ == "LlamaDecoderLayer" for layer in layers)
    job = runs[config]
    assert_matches_references(job)
    assert (job.metrics["reduce_scatter_calls"] == len(layers) + 1).all()


FP16 = MODES["last-reshard_on"].replace(amp="fp16", epochs=3)


@pytest.fixture(scope="module")
def sft_configs(records):
    """sft records (test_sft_oracle's) sharded per block, gradients synced on the last micro-batch, aggregated by
    the mean of each record's token mean (packed) and by its token sum over C (padded)."""
    base = sft(records, nproc=WORLD, micro_batch_size=2, accum_steps=2, lr=0.1, sharding="fsdp", fsdp_sync="last")
    return [base.replace(loss_agg="seq-mean-token-mean", packing="on"),
            base.replace(loss_agg="seq-mean-token-sum-norm", packing="off")]


def test_sharded_sft_aggregates_its_records_as_one_process_does(runs, sft_configs):
    """Each rank weighs its share of the window's records from the whole window's counts: the sharded job trains
    the one-process parameters in each mode."""
    for config in sft_configs:
        assert_matches_references(runs[config])


@pytest.fixture(scope="module")
def pg_config(rollouts):
    """pg rollouts (test_pg_oracle's: groups of 6, 6, 4 and 4) aggregated by group-mean-token-mean, 2 processes with
    b=3, k=2: windows of 12 and 8 records, the last micro-batch's shares uneven, groups split across ranks."""
    return pg(rollouts, nproc=WORLD, micro_batch_size=3, accum_steps=2, sharding="fsdp", fsdp_sync="last")


def test_sharded_pg_aggregates_its_rollouts_by_group_as_one_process_does(runs, pg_config):
    """Each rank weighs its share's tokens by -A·log p over its group's tokens, counted from the whole window: the
    job trains the one-process parameters and logs the same loss."""
    assert_matches_references(runs[pg_config])


@pytest.fixture(scope="module")
def runs(text_config, llama_config, sft_configs, pg_config, tmp_path_factory):
    """Every config the oracles, the counts and the fp16 check read, and the uninterrupted run the stopped and
    killed job resumes to, trained one after the other by one spawned pair of sharded ranks (one start, not a
    torchrun job each): the runs by config."""
    configs = [*MODES.values(), FP16, text_config, llama_config, *sft_configs, pg_config, RESUMED]
    return spawned_runs(configs, tmp_path_factory.mktemp("fsdp_ranks"))


# --- mixed precision ---------------------------------------------------------------------------------


def test_an_fp16_sharded_run_scales_its_loss_and_trains(runs):
    """fp16: weights gathered in fp16 (MixedPrecisionPolicy), reductions in fp32, a GradScaler on the sharded
    gradients; the run finishes with the loss falling and every step's scale logged."""
    job = runs[FP16]
    metrics = job.metrics
    assert metrics["scale"].notna().all() and (metrics["scale"] > 0).all()
    assert metrics["loss"].iloc[-3:].mean() < metrics["loss"].iloc[:3].mean()
    assert all(v.dtype == torch.float32 for v in job.model.values())  # model.pt holds the fp32 master weights


# --- endings: stop, kill, resume, a failing rank -----------------------------------------------------------

# 20 steps of SGD with momentum, warm-up, cosine decay and clipping on digits, sharded with sync on the last
# micro-batch and gathered weights kept; a checkpoint every 4 steps.
RESUMED = RunConfig(model="mlp", dataset="digits", micro_batch_size=B, accum_steps=K, nproc=WORLD, max_steps=20,
                    device="cpu", eval_every=8, optimizer="sgd", momentum=0.9, lr=0.05, lr_schedule="cosine",
                    warmup_steps=5, grad_clip=0.5, checkpoint_every=4, sharding="fsdp", fsdp_sync="last",
                    fsdp_reshard_after_backward="off")


def _rank_process(procs, rank: int):
    for proc in procs:
        try:
            if "worker" in proc.cmdline() and proc.environ().get("RANK") == str(rank):
                return proc
        except Exception:  # noqa: BLE001 - a process that ended meanwhile
            continue
    pytest.fail(f"no process of rank {rank} among {[p.pid for p in procs]}")


def _shard_dirs(runner: Runner, run_id: str) -> list[str]:
    return sorted(p.name for p in (runner.store.path(run_id) / SHARDS_DIR).iterdir())


@pytest.fixture(scope="module")
def stopped_killed_resumed(tmp_path_factory):
    """RESUMED as a torchrun job of the runner: stopped (agreed at a step's end: asserted stopped, not killed, its
    sharded checkpoint checked), resumed, a rank killed (the run fails, no process left), resumed again to its end.
    The runner, the run's id, and the steps of the stop's and of the kill's last checkpoints."""
    paced = ",".join(f"slow@{s}:0*0.25" for s in range(1, 21))
    with runner_with_faults(tmp_path_factory.mktemp("stopped_runs"), paced) as (runner, patch):
        run_id = runner.submit(RESUMED)
        stop_and_assert_stopped(runner, run_id, _running_job(runner, run_id, rows=3), killed=False)
        checkpoint = run_checkpoints(runner.store, run_id).load()
        stopped_at = checkpoint["counters"]["step"]
        assert 3 <= stopped_at < 20 and "model" not in checkpoint  # the weights are in the shards
        assert _shard_dirs(runner, run_id) == [checkpoint["sharded"].split("/")[-1]]  # older ones pruned
        assert len(list((runner.store.path(run_id) / checkpoint["sharded"]).glob("*.distcp"))) == WORLD
        # Rank 0 recorded every rank's file, written before it hashed them (checked again at each resume).
        assert sorted(checkpoint["sharded_sha256"]) == [".metadata",
                                                        *(f"__{rank}_0.distcp" for rank in range(WORLD))]

        runner.resume(run_id)
        procs = _running_job(runner, run_id, rows=stopped_at + 5)  # past the next periodic checkpoint
        os.kill(_rank_process(procs, 1).pid, signal.SIGKILL)
        killed = runner.wait(run_id, timeout=WAIT_S)
        assert killed.state == RunState.FAILED, (killed.state, killed.message)
        assert_none_survive(procs)
        resumed_at = run_checkpoints(runner.store, run_id).load()["counters"]["step"]

        patch.delenv("GACCUM_FAULTS")
        runner.resume(run_id)
        assert runner.wait(run_id, timeout=WAIT_S).state == RunState.FINISHED
        yield runner, run_id, stopped_at, resumed_at


def test_a_stopped_then_killed_sharded_run_resumes_bit_exact(runs, stopped_killed_resumed):
    """Stopped (agreed at a step's end), resumed, then a rank killed: the run fails; resumed again from its last
    DCP checkpoint (each rank its part), it ends bit-equal to the same run never interrupted (trained by the
    spawned ranks, on the engine the job's ranks run)."""
    runner, run_id, stopped_at, resumed_at = stopped_killed_resumed
    assert stopped_at < resumed_at < 20 and resumed_at % RESUMED.checkpoint_every == 0
    uninterrupted = runs[RESUMED]
    a, b = uninterrupted.model, runner.store.load_model(run_id)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ma, mb = uninterrupted.metrics, runner.store.read_metrics(run_id)
    assert mb["step"].tolist() == list(range(1, 21))
    assert ma["loss"].equals(mb["loss"]) and ma["grad_norm"].equals(mb["grad_norm"])
    print(f"\nstopped at step {stopped_at}, killed after the checkpoint of step {resumed_at}; resumed twice, "
          f"bit-equal to the uninterrupted run (largest |diff| {max_diff(a, b)})")


def _running_job(runner: Runner, run_id: str, rows: int):
    """The job's processes once it has logged `rows` step rows and still runs."""
    procs = job_processes(runner, run_id)
    wait_for_rows(runner, run_id, rows=rows, timeout=WAIT_S)
    assert not runner.snapshot(run_id).done, runner.snapshot(run_id).message
    return procs


def test_a_failing_rank_fails_a_sharded_run_and_leaves_no_process(make_runner, monkeypatch):
    """An error on rank 1 mid-run ends the whole sharded job as failed with rank 1's message, and every process
    of it exits (the other rank, waiting in a collective, is ended by torchrun)."""
    monkeypatch.setenv("GACCUM_FAULTS", "slow@2:0*3,error@3:1")
    monkeypatch.setenv("GACCUM_FAULTS_RANK", "1")
    runner = make_runner()
    run_id = runner.submit(MODES["every-reshard_on"])
    procs = job_processes(runner, run_id)
    started = time.monotonic()
    snapshot = runner.wait(run_id, timeout=WAIT_S)
    assert snapshot.done, f"the job did not end within {WAIT_S} s of a rank failing"
    assert snapshot.state == RunState.FAILED
    assert "rank 1" in snapshot.message and "injected fault" in snapshot.message, snapshot.message
    assert [row["step"] for row in snapshot.metrics] == [1, 2]
    assert_none_survive(procs)
    print(f"\nfailed {time.monotonic() - started:.1f} s after submit: {snapshot.message!r}")


def test_an_inf_in_one_ranks_shard_skips_the_step_on_every_rank(tmp_path):
    """The GradScaler on sharded gradients reduces its inf check over the ranks: an inf only in rank 1's shard
    skips optimizer.step() on rank 0 too, and both lower the scale alike (else the ranks' shards would part)."""
    import inf_shard_rank

    run_ranks(inf_shard_rank.main, WORLD, (WORLD, str(tmp_path)), WAIT_S)  # spawned: no launcher importing torch
    results = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(WORLD)]
    for rank, result in enumerate(results):
        assert result["skipped"] and result["unchanged"], (rank, result)
        assert result["scale"] == result["scale_before"] / 2, (rank, result)

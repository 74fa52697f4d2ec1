"""DDP over NCCL, a GPU per rank (issue 41, items 6, 9 and 10): two spawned ranks train the one-process parameters
through partial last windows (one leaves rank 1 no sample), holding one gradient copy on each GPU (.grad a view into
DDP's buckets); resumed, each rank reads checkpoint.pt itself, and only a rank that finds another file there gets
it through NCCL; the process group waits for rank 0's evaluation, not NCCL's 10 minutes. What the ranks do:
tests/ddp_buckets_rank.py, which tests/train/test_ddp_buckets_resume.py runs over gloo on the CPU.

Marked `cuda`; skipped with the reason "no CUDA device" without one, and "needs 2 CUDA devices" with one. No
streamlit, plotly, scikit-learn or psutil (fake images only)."""

from __future__ import annotations

import pytest
import torch

from ddp_buckets_rank import WORLD, seen_by_ranks
from gaccum_core.config import RunConfig
from gaccum_core.plan.sharding import MB
from gaccum_core.train.distributed import collective_timeout
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
              pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() < 2,
                                 reason="needs 2 CUDA devices")]

WAIT_S = 600.0  # only so a hung job fails instead of hanging
# 100 samples in global windows of 2·4·3 = 24: four whole windows, then one of 4 samples that rank 0 alone holds.
ORACLE = RunConfig(model="mlp", dataset="fake", image_size=8, fake_samples=100, fake_classes=10, micro_batch_size=4,
                   accum_steps=3, nproc=WORLD, epochs=2, optimizer="sgd", lr=0.05, momentum=0.9, eval_batches=7,
                   checkpoint_every=0, device="cuda")
RESUMED = ORACLE.replace(accum_steps=2, optimizer="adamw", lr=1e-3)


@pytest.fixture(scope="module")
def seen(tmp_path_factory) -> list[dict]:
    """What each rank saw, by rank."""
    return seen_by_ranks(tmp_path_factory.mktemp("ddp_nccl"), "cuda", ORACLE, RESUMED, WAIT_S)


def _one_process(config: RunConfig) -> dict[str, torch.Tensor]:
    engine = Engine(config, torch.device("cuda", 0))
    engine.run(RowKeeper())
    return {k: v.cpu() for k, v in engine.model.state_dict().items()}


def test_two_gpus_train_the_one_process_parameters_through_partial_windows(seen):
    """The same global windows in one process (b=8, k=3) and as one batch each (b=24, k=1): equal within 1e-5."""
    trained = seen[0]["memory"]["trained"]
    single = ORACLE.replace(nproc=1)
    for config in (single.replace(micro_batch_size=8), single.replace(micro_batch_size=24, accum_steps=1)):
        reference = _one_process(config)
        delta = max((trained[k] - reference[k]).abs().max().item() for k in reference)
        print(f"\nfigure: max |Δ| {delta:.1e} (2 GPUs b=4 k=3 against 1 GPU b={config.micro_batch_size} "
              f"k={config.accum_steps}, NCCL)")
        assert delta <= 1e-5


def test_each_gpu_holds_one_gradient_copy_after_every_micro_batch(seen):
    """From the third step on, .grad and DDP's buckets on each GPU hold the parameters' bytes once, what the planner
    counts."""
    for rank in seen:
        memory = rank["memory"]
        assert memory["param_bytes"] / MB == pytest.approx(memory["planned_gradients_mb"])
        settled = [(ends, held) for step, ends, _, held in memory["held"] if step >= 2]
        assert any(not ends for ends, _ in settled)  # no_sync micro-batches among them
        assert all(held == memory["param_bytes"] for _, held in settled), (memory["param_bytes"], settled)


@pytest.mark.parametrize("name", ["one_machine", "shared_runs_dir"])
def test_resuming_ranks_read_the_checkpoint_themselves_and_nccl_carries_none_of_it(seen, name):
    for rank in seen:
        got = rank[name]
        assert got["same"] and got["step"] == 2
        assert not any(r["tensor"] for r in got["received"]), got["received"]
        assert sum(r["bytes"] for r in got["received"]) < got["checkpoint_bytes"] / 20


def test_a_rank_that_finds_another_file_gets_the_checkpoint_through_nccl(seen):
    for rank in seen:
        assert rank["own_runs_dir"]["same"] and rank["own_runs_dir"]["step"] == 2
    got = seen[1]["own_runs_dir"]
    assert any(r["tensor"] and r["bytes"] >= got["checkpoint_bytes"] / 2 for r in got["received"])


def test_the_nccl_group_waits_for_rank_0s_evaluation_not_10_minutes(seen):
    expected = collective_timeout(ORACLE, "nccl")
    print(f"\nfigure: NCCL timeout {expected.total_seconds() / 60:.1f} min")
    for rank in seen:
        assert rank["timeout_s"] == pytest.approx(expected.total_seconds())

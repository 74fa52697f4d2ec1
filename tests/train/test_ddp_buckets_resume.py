"""Issue 41, items 6, 9 and 10 on the CPU (gloo, 2 spawned processes, one launch for every check):

- 6: a DDP rank holds one copy of the gradients, the one the planner counts: .grad is a view into DDP's buckets
  (gradient_as_bucket_view) after every micro-batch, not a second buffer beside them;
- 9: resuming a data-parallel run, each rank reads checkpoint.pt itself; the checkpoint goes through the process
  group only when a rank finds another file at rank 0's path (ranks on machines of their own);
- 10: the process group waits collective_timeout(config): rank 0's evaluation and checkpoint, not NCCL's 10 min.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import torch

from ddp_buckets_rank import WORLD, seen_by_ranks
from gaccum_core.config import RunConfig
from gaccum_core.plan.sharding import MB
from gaccum_core.execution.resume import checkpoints_in
from gaccum_core.train.distributed import EVAL_S_PER_SAMPLE, WAIT_FLOOR, WHOLE_SPLIT_SAMPLES, collective_timeout
from jobs import WAIT_S

# Windows of 3 micro-batches (2 of them under no_sync), 4 steps: DDP rebuilds its buckets after the first.
MEMORY = RunConfig(model="mlp", dataset="fake", image_size=8, fake_samples=96, fake_classes=10, micro_batch_size=4,
                   accum_steps=3, nproc=WORLD, max_steps=4, eval_batches=7, device="cpu")
RESUMED = MEMORY.replace(accum_steps=2, optimizer="adamw", lr=1e-3)


@pytest.fixture(scope="module")
def seen(tmp_path_factory) -> list[dict]:
    """What each rank saw (tests/ddp_buckets_rank.py), by rank."""
    return seen_by_ranks(tmp_path_factory.mktemp("ddp_buckets"), "cpu", MEMORY, RESUMED, WAIT_S)


@pytest.mark.multiprocess
def test_a_ddp_rank_holds_one_gradient_copy_after_every_micro_batch(seen):
    """After the buckets are rebuilt (from the third step on), .grad and DDP's buckets together hold the
    parameters' bytes once, after a no_sync micro-batch as after the window's last: what the planner counts."""
    for rank in seen:
        memory = rank["memory"]
        assert memory["param_bytes"] / MB == pytest.approx(memory["planned_gradients_mb"])
        settled = [(ends, grads, held) for step, ends, grads, held in memory["held"] if step >= 2]
        assert len(settled) == (MEMORY.max_steps - 2) * MEMORY.accum_steps
        assert sum(not ends for ends, _, _ in settled) == (MEMORY.max_steps - 2) * (MEMORY.accum_steps - 1)
        for _, grads, held in settled:
            assert grads == memory["params"]
            assert held == memory["param_bytes"], f"{held} bytes of gradients, the parameters have {memory['param_bytes']}"


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", ["one_machine", "shared_runs_dir"])
def test_resuming_ranks_read_the_checkpoint_themselves_when_they_reach_rank_0s_file(seen, name):
    """No checkpoint crosses the process group: what a rank receives is small next to checkpoint.pt and holds no
    tensor; every rank resumes the trained parameters at the checkpoint's step."""
    for rank in seen:
        got = rank[name]
        assert got["same"] and got["step"] == 2
        assert not any(r["tensor"] for r in got["received"]), got["received"]
        assert sum(r["bytes"] for r in got["received"]) < got["checkpoint_bytes"] / 20


@pytest.mark.multiprocess
def test_a_rank_that_finds_another_file_gets_the_checkpoint_from_rank_0(seen):
    """Ranks on machines of their own (another file at rank 0's path): rank 0's checkpoint is broadcast, and every
    rank resumes the trained parameters."""
    for rank in seen:
        assert rank["own_runs_dir"]["same"] and rank["own_runs_dir"]["step"] == 2
    got = seen[1]["own_runs_dir"]
    assert any(r["tensor"] and r["bytes"] >= got["checkpoint_bytes"] / 2 for r in got["received"])


@pytest.mark.multiprocess
def test_the_process_group_waits_for_rank_0s_evaluation(seen):
    """The group the worker joins waits collective_timeout(config), longer than torch's default for gloo."""
    expected = collective_timeout(MEMORY, "gloo")
    assert expected > timedelta(minutes=30)
    for rank in seen:
        assert rank["timeout_s"] == pytest.approx(expected.total_seconds())


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_the_collective_timeout_covers_the_evaluation_and_never_undercuts_torch(backend):
    """WAIT_FLOOR plus EVAL_S_PER_SAMPLE per test sample an evaluation reads (WHOLE_SPLIT_SAMPLES for the whole split)."""
    small = RunConfig(micro_batch_size=16, eval_batches=10)
    assert collective_timeout(small, backend) == WAIT_FLOOR + timedelta(seconds=160 * EVAL_S_PER_SAMPLE)
    whole = small.replace(eval_batches=0)
    assert collective_timeout(whole, backend) == WAIT_FLOOR + timedelta(seconds=WHOLE_SPLIT_SAMPLES * EVAL_S_PER_SAMPLE)
    assert collective_timeout(small, backend) >= timedelta(minutes=30 if backend == "gloo" else 10)


def test_a_checkpoint_loaded_for_gpus_is_mapped_from_its_file_not_read_into_memory(tmp_path):
    """load(mmap=True), as job_checkpoint loads it for ranks on GPUs: the file is mapped (the ranks of one machine
    share its pages), the tensors the same; load() reads it."""
    checkpoints = checkpoints_in(tmp_path)
    checkpoints.save({"model": {"weight": torch.arange(4096.0)}})

    def mapped() -> bool:
        return str(checkpoints.path) in Path("/proc/self/maps").read_text()

    read = checkpoints.load()
    assert not mapped()
    state = checkpoints.load(mmap=True)
    assert mapped() and torch.equal(state["model"]["weight"], read["model"]["weight"])

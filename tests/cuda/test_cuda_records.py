"""sft's and pg's loss aggregation on CUDA (issue 43 on the GPU box): each micro-batch's per-token weights, read on the
host from its records' weights and copied beside the device's token losses without a sync, give b·k accumulated equal
to one batch of b·k in fp32 (TF32 off) for each mode, padded and packed, a partial last window included; and the CPU
run's weights within fp32 rounding.

Marked `cuda`; without a CUDA device each test is skipped with the reason "no CUDA device". Imports no streamlit or
plotly (a GPU image's pytest runs it: `python3 -m pytest -m cuda tests/`).
"""

from __future__ import annotations

import pytest
import torch

from gaccum_core.train import engine
from records_data import pg, records, rollouts, sft  # noqa: F401  (the records and rollouts fixtures)
from training import trained

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

# (data set, mode, packing): every way the weights differ (by token, record, constant, group), padded and packed.
CASES = [("sft", "seq-mean-token-mean", "off"), ("sft", "seq-mean-token-sum-norm", "on"), ("pg", "token-mean", "off"),
         ("pg", "seq-mean-token-mean", "on"), ("pg", "group-mean-token-mean", "off")]


@pytest.fixture(autouse=True)
def no_sample(monkeypatch):
    monkeypatch.setattr(engine, "sample_text", lambda *args: "")  # the last evaluation's greedy sample: not checked


@pytest.mark.parametrize("dataset,mode,packing", CASES)
def test_each_mode_accumulated_on_cuda_equals_one_big_batch_and_the_cpu_run(records, rollouts, token_cache_dir,
                                                                           dataset, mode, packing):
    make, text_file = (sft, records) if dataset == "sft" else (pg, rollouts)

    def run(b: int, k: int, device: str = "cuda") -> tuple[torch.Tensor, list[dict]]:
        weights, rows = trained(make(text_file, packing=packing, micro_batch_size=b, accum_steps=k, loss_agg=mode,
                                     device=device))
        return weights.cpu(), rows.steps

    accumulated, steps = run(2, 4)
    big, _ = run(8, 1)
    on_cpu, _ = run(2, 4, "cpu")
    assert min(row["samples"] for row in steps) < 8  # the epoch ends in a partial window
    exact, cpu = (accumulated - big).abs().max().item(), (accumulated - on_cpu).abs().max().item()
    print(f"\nfigure: {dataset} {mode} packing {packing}: max |Δ| {exact:.1e} against one batch of b·k on CUDA, "
          f"{cpu:.1e} against the CPU run")
    assert exact <= 1e-5 and cpu <= 1e-4

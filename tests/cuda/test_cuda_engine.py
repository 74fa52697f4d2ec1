"""Every CUDA path of the engine, checked on a GPU (issue 35): the oracle, bf16 and fp16 (a scale that backs off
from 2^40, skipped steps recorded), the allocator's columns, cache clearing, torch.compile, the device line.

Marked `cuda`; without a CUDA device each test is skipped with the reason "no CUDA device", so the suite stays
green on the CPU. Imports no streamlit or plotly and runs on torch 2.11 or later with pytest and pandas: a GPU
image often carries those and not the dashboard (`python3 -m pytest -m cuda tests/`, PYTHONPATH at the checkout).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.lab.equivalence import compare_gradients
from gaccum_core.train.device import device_choices
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

# mlp on 64 fake 3×8×8 images (torchvision only: a GPU image may lack scikit-learn, which digits needs), which it
# learns by heart within a few dozen steps; short and well conditioned; the same samples and weights at every (b, k).
BASE = RunConfig(model="mlp", dataset="fake", image_size=8, fake_samples=64, device="cuda", optimizer="sgd", lr=0.05,
                 epochs=1000, max_steps=12, eval_every=10**9, checkpoint_every=0)


def _trained(config: RunConfig) -> tuple[torch.Tensor, list[dict]]:
    engine = Engine(config)
    rows = RowKeeper()
    engine.run(rows)
    return torch.cat([p.detach().flatten().cpu() for p in engine.model.parameters()]), rows.steps


def _oracle(config: RunConfig) -> tuple[float, list[dict]]:
    """max |Δ| of the weights trained at b=8, k=4 against b=32, k=1 from the same weights on the same samples,
    and the accumulated run's rows."""
    accumulated, rows = _trained(config.replace(micro_batch_size=8, accum_steps=4))
    big, _ = _trained(config.replace(micro_batch_size=32, accum_steps=1))
    return (accumulated - big).abs().max().item(), rows


def _tf32_flags() -> tuple[str, ...]:
    return (torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision,
            torch.backends.cudnn.rnn.fp32_precision)


def test_the_oracle_on_cuda_b8_k4_equals_b32_k1_in_fp32():
    delta, _ = _oracle(BASE)
    print(f"\nfigure: max |Δ| {delta:.1e} (b=8, k=4 against b=32, k=1, fp32)")
    assert delta <= 1e-5


def test_the_cnn_oracle_on_cuda_holds_in_true_fp32_through_a_partial_window():
    """cuDNN runs fp32 convolutions in TF32 by default on Ampere and newer, and may pick another algorithm for a
    micro-batch of 8 than for a batch of 32: an fp32 run turns TF32 off (Precision, true_fp32), and gives the
    process's flags back after. 70 samples in windows of 32: every epoch ends in a window of 6."""
    before = _tf32_flags()
    delta, rows = _oracle(BASE.replace(model="cnn", image_size=16, fake_samples=70))
    print(f"\nfigure: max |Δ| {delta:.1e} (cnn, b=8, k=4 against b=32, k=1, fp32, windows of 32, 32, 6)")
    assert [r["samples"] for r in rows[:3]] == [32, 32, 6]
    assert delta <= 1e-5
    assert _tf32_flags() == before


def test_the_equivalence_check_finds_the_cnn_equal_in_fp32_on_cuda():
    """The check compares one window both ways in IEEE fp32 (TF32 would round b and b·k's convolutions apart)."""
    report = compare_gradients(BASE.replace(model="cnn", image_size=16, micro_batch_size=8, accum_steps=4))
    print(f"\nfigure: worst rel. L2 {report.table['rel_l2'].max():.1e} (cnn, one window, fp32)")
    assert report.equal, report.verdict


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_mixed_precision_trains_on_cuda(amp):
    if amp == "bf16" and torch.cuda.get_device_capability(0) < (8, 0):
        pytest.skip("cuda:0 is below compute capability 8.0: gaccum refuses bf16 there (test_cuda_compile.py)")
    _, rows = _trained(BASE.replace(micro_batch_size=16, accum_steps=2, amp=amp, max_steps=40))
    losses = [r["loss"] for r in rows if math.isfinite(r["loss"])]
    assert losses[-1] < losses[0]


def test_fp16_backs_off_from_2_to_the_40_and_records_the_skipped_steps():
    """A scale of 2^40 overflows fp16's gradients: the GradScaler skips those steps and halves the scale until
    the gradients fit; the rows record the scale and the skipped steps, and the run still trains."""
    _, rows = _trained(BASE.replace(micro_batch_size=16, accum_steps=2, amp="fp16", init_scale=2.0**40,
                                    max_steps=80))  # about 25 halvings to fp16's range, then it trains
    assert rows[0]["scale"] == 2.0**40 and rows[0]["skipped"] == 1
    for row, after in zip(rows, rows[1:]):
        if row["skipped"]:
            assert after["scale"] == row["scale"] / 2  # backoff_factor 0.5
    assert [r["skipped_total"] for r in rows] == list(itertools.accumulate(r["skipped"] for r in rows))
    print(f"\nfigure: {rows[-1]['skipped_total']} steps skipped, scale 2^40 → {rows[-1]['scale']:g}")
    trained = [r["loss"] for r in rows if not r["skipped"]]
    assert len(trained) >= 2 and trained[-1] < trained[0]  # once the gradients fit, it trains


def test_the_allocator_columns_are_filled_and_hold_the_counted_memory():
    _, rows = _trained(BASE.replace(micro_batch_size=32, accum_steps=2, optimizer="adam", lr=1e-3, max_steps=4))
    last = rows[-1]
    for column in ("mem_allocated_mb", "mem_reserved_mb", "mem_peak_mb"):
        assert last[column] is not None and last[column] > 0, column
    fixed = last["weights_mb"] + last["gradients_mb"] + last["optimizer_mb"]
    assert last["mem_peak_mb"] >= fixed
    assert last["mem_reserved_mb"] >= last["mem_allocated_mb"]


@pytest.mark.parametrize("mode", ["step", "micro"])
def test_clearing_the_cache_is_timed_and_lowers_the_reserved_memory(mode):
    big = BASE.replace(model="cnn", dataset="fake", image_size=64, fake_samples=512, micro_batch_size=64,
                       accum_steps=2, max_steps=3)
    _, kept = _trained(big)
    torch.cuda.empty_cache()
    _, cleared = _trained(big.replace(clear_cache=mode))
    assert all(r["cache_clear_s"] > 0 for r in cleared)
    assert cleared[-1]["mem_reserved_mb"] < kept[-1]["mem_reserved_mb"]


def test_compiled_on_cuda_equals_eager_within_1e_4():
    config = BASE.replace(micro_batch_size=8, accum_steps=4, max_steps=6)
    eager, _ = _trained(config)
    compiled, _ = _trained(config.replace(compile="default"))
    delta = (compiled - eager).abs().max().item()
    print(f"\nfigure: max |Δ| {delta:.1e} (compiled against eager)")
    assert delta <= 1e-4


def test_the_device_choices_name_each_gpu():
    """The device line: tests/cuda/test_cuda_device_line.py."""
    assert [f"cuda:{i}" for i in range(torch.cuda.device_count())] == device_choices()[2:]

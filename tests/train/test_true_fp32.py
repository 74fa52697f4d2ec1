"""fp32 is IEEE fp32 on CUDA, not TF32 (issue 41, item 4), checked on the CPU: torch's TF32 flags are process
state that a CPU build reads and writes too, so a CUDA device passed in shows what the context sets and restores."""

from __future__ import annotations

import pytest
import torch

from gaccum_core.train.precision import Precision, true_fp32

CUDA = torch.device("cuda")
CPU = torch.device("cpu")


def flags() -> dict[str, object]:
    """Every TF32 flag as torch's two APIs read it: the fp32_precision switches and the legacy booleans."""
    backends = torch.backends
    return {"matmul": backends.cuda.matmul.fp32_precision, "conv": backends.cudnn.conv.fp32_precision,
            "rnn": backends.cudnn.rnn.fp32_precision, "mkldnn_matmul": backends.mkldnn.matmul.fp32_precision,
            "legacy_matmul": _legacy(lambda: backends.cuda.matmul.allow_tf32),
            "legacy_cudnn": _legacy(lambda: backends.cudnn.allow_tf32),
            "matmul_precision": _legacy(torch.get_float32_matmul_precision)}


def _legacy(read):
    """A legacy flag, or "unreadable" where torch refuses to read it: the two APIs were set apart."""
    try:
        return read()
    except RuntimeError:
        return "unreadable"


TRUE_FP32 = {"matmul": "ieee", "conv": "ieee", "rnn": "ieee", "legacy_matmul": False, "legacy_cudnn": False,
             "matmul_precision": "highest"}


@pytest.fixture(autouse=True)
def torch_defaults():
    """Each test from torch's defaults (cuDNN convolutions in TF32), and back to them after, whatever it did."""
    def defaults() -> None:
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.fp32_precision = "none"
        torch.backends.mkldnn.matmul.fp32_precision = "none"
    defaults()
    yield
    defaults()


def test_on_cuda_tf32_is_off_inside_in_both_apis_and_restored_after():
    before = flags()
    assert before["conv"] == "tf32"  # torch's default: cuDNN convolutions may run in TF32
    with true_fp32(CUDA):
        inside = flags()  # reading the legacy booleans raises where only one API was set (inductor reads them)
    assert {k: inside[k] for k in TRUE_FP32} == TRUE_FP32
    assert flags() == before


def test_the_flags_are_restored_when_the_body_raises():
    before = flags()
    with pytest.raises(ZeroDivisionError):
        with true_fp32(CUDA):
            1 / 0
    assert flags() == before


@pytest.mark.parametrize("users", ["legacy", "mixed"])
def test_a_users_own_tf32_settings_come_back_exactly(users):
    torch.set_float32_matmul_precision("high")
    if users == "legacy":
        torch.backends.cudnn.allow_tf32 = False
    else:  # only the new API for cuDNN's RNNs: torch refuses to read the legacy cuDNN switch then
        torch.backends.cudnn.rnn.fp32_precision = "ieee"
    before = flags()
    with true_fp32(CUDA), true_fp32(CUDA):  # nested, as the lab wraps a Precision's own
        assert {k: flags()[k] for k in TRUE_FP32} == TRUE_FP32
    assert flags() == before


def test_off_cuda_nothing_changes():
    before = flags()
    with true_fp32(CPU):
        assert flags() == before


def _during_forward_and_backward(precision: Precision) -> list[dict[str, object]]:
    """The flags as a model's forward and its backward see them, through the precision's own methods."""
    seen = []
    w = torch.ones(3, requires_grad=True)
    w.register_hook(lambda grad: seen.append(flags()))
    with precision.autocast():
        seen.append(flags())
        loss = (w * 2.0).sum()
    precision.backward(loss)
    return seen


def test_an_fp32_run_on_cuda_runs_its_forward_and_backward_in_true_fp32():
    before = flags()
    forward, backward = _during_forward_and_backward(Precision("off", CUDA))
    assert {k: forward[k] for k in TRUE_FP32} == TRUE_FP32
    assert {k: backward[k] for k in TRUE_FP32} == TRUE_FP32
    assert flags() == before  # between micro-batches, and after the run, the process's own flags


def test_mixed_precision_and_the_cpu_leave_the_flags_alone():
    before = flags()
    assert _during_forward_and_backward(Precision("off", CPU)) == [before, before]
    assert _during_forward_and_backward(Precision("bf16", CPU)) == [before, before]

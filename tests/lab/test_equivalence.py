"""The equivalence check: accumulation matches the big batch where it should, and says why where not."""

import pandas as pd
import pytest
import torch
from torch import nn

import gaccum_core.lab.equivalence as equivalence
import gaccum_core.models.build
import gaccum_core.models.vision
from gaccum_core.config import RunConfig
from gaccum_core.lab.equivalence import (COLUMNS, SIDE_BY_SIDE_COLUMNS, GradientReport, ReferenceTooLarge,
                                     compare_gradients, largest_fitting_effective_batch, train_side_by_side)
from gaccum_core.lab.verdict import MODULE_COLUMNS, Reason, find_reasons, module_reason
from gaccum_core.data import record_sequences
from gaccum_core.data.load import load_data
from gaccum_core.train.accumulation import epoch_order
from gaccum_core.train import engine as engine_module
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper
from records_data import pg, rollouts  # noqa: F401  (the rollouts fixture)
from training import trained


def config(**fields):
    return RunConfig(**{"device": "cpu", "micro_batch_size": 8, "accum_steps": 4, **fields})


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_mlp_fp32_accumulated_gradient_equals_the_big_batch(reduction):
    report = compare_gradients(config(model="mlp", reduction=reduction))
    table = report.table
    assert list(table.columns) == COLUMNS
    assert table["name"].tolist() == ["1.weight", "1.bias", "3.weight", "3.bias", "5.weight", "5.bias"]
    assert table.loc[0, "shape"] == "64×64" and table.loc[0, "numel"] == 4096
    assert report.equal
    assert (table["rel_l2"] < 1e-5).all() and (table["cosine"] > 0.99999).all()
    assert report.verdict.startswith("equal up to float rounding") and report.reasons == ()
    modules = report.modules
    assert list(modules.columns) == MODULE_COLUMNS and modules["module"].tolist() == ["1", "3", "5"]
    assert modules["parameters"].tolist() == [2, 2, 2] and modules["numel"].tolist() == [4160, 4160, 650]
    assert modules["equal"].all() and (modules["reason"] == "").all()
    assert modules.loc[0, "worst_rel_l2"] == table.loc[:1, "rel_l2"].max()


def test_a_report_made_the_old_way_still_has_an_empty_module_view():
    report = GradientReport(pd.DataFrame(columns=COLUMNS), "equal up to float rounding", True)
    assert list(report.modules.columns) == MODULE_COLUMNS and report.modules.empty and report.reasons == ()


def test_batchnorm_makes_micro_batches_differ_and_the_verdict_names_its_layers():
    report = compare_gradients(config(model="cnn_bn", micro_batch_size=2, accum_steps=8))
    assert not report.equal
    assert (report.table["rel_l2"] > 1e-3).any()
    assert report.verdict.startswith("differs: BatchNorm (") and report.reasons == ("BatchNorm",)
    # cnn_bn on 8×8 digits: conv 0, BatchNorm2d 1, relu, conv 3, BatchNorm2d 4, ..., linear 8
    assert "BatchNorm layers '1', '4'" in report.verdict
    assert "micro-batch of 2" in report.verdict and "batch of 16" in report.verdict
    reasons = dict(zip(report.modules["module"], report.modules["reason"]))
    assert reasons == {"0": "via BatchNorm", "1": "BatchNorm", "3": "via BatchNorm", "4": "BatchNorm",
                       "8": "via BatchNorm"}
    # BatchNorm's running statistics change in every forward, but are BatchNorm's, not another reason.
    assert "buffer" not in report.verdict


def _mlp_with_dropout(p):
    def build(name, input_shape, num_classes, image_size=0, weights_file=""):
        channels, height, width = input_shape
        return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, 32), nn.ReLU(),
                             nn.Dropout(p), nn.Linear(32, num_classes))
    return build


def test_active_dropout_is_blamed_with_how_to_turn_it_off(monkeypatch):
    monkeypatch.setattr(gaccum_core.models.build, "build_model", _mlp_with_dropout(0.5))
    report = compare_gradients(config())
    assert not report.equal and report.reasons == ("dropout",)
    assert report.verdict.startswith("differs: dropout (") and "Dropout layers '3'" in report.verdict
    assert "--no-dropout" in report.verdict and '"Dropout off" box' in report.verdict
    assert report.modules["reason"].tolist() == ["via dropout", "via dropout"]
    assert compare_gradients(config(no_dropout=True)).equal


def test_dropout_with_p_zero_changes_nothing(monkeypatch):
    monkeypatch.setattr(gaccum_core.models.build, "build_model", _mlp_with_dropout(0.0))
    assert compare_gradients(config()).equal


class _Counted(nn.Module):
    """A BatchNorm, then a scale times the forward passes seen so far (a buffer updated in forward)."""

    def __init__(self, features, num_classes):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(features, 16), nn.BatchNorm1d(16), nn.Linear(16, num_classes))
        self.scale = nn.Linear(num_classes, num_classes)
        self.register_buffer("steady", torch.full((2,), float("nan")))  # NaN, unchanged: not a change
        self.scale.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.scale.calls += 1
        return self.scale(self.body(x)) * self.scale.calls


def test_a_buffer_updated_in_forward_is_named_and_batchnorm_statistics_are_not(monkeypatch):
    monkeypatch.setattr(gaccum_core.models.build, "build_model",
                        lambda name, shape, classes, size=0, weights="": _Counted(shape[0] * shape[1] * shape[2], classes))
    report = compare_gradients(config())
    assert report.reasons == ("BatchNorm", "a buffer updated in forward")
    assert report.verdict.startswith("differs: BatchNorm, a buffer updated in forward (")
    assert "buffers 'scale.calls'" in report.verdict and "running_mean" not in report.verdict
    assert "steady" not in report.verdict
    reasons = dict(zip(report.modules["module"], report.modules["reason"]))
    assert reasons == {"body.1": "via BatchNorm, a buffer updated in forward",
                       "body.2": "BatchNorm; via a buffer updated in forward",
                       "body.3": "via BatchNorm, a buffer updated in forward",
                       "scale": "a buffer updated in forward; via BatchNorm"}


def _mlp(batch_norm):
    layers = [nn.Flatten(), nn.Linear(64, 8)] + ([nn.BatchNorm1d(8)] if batch_norm else []) + [nn.Linear(8, 10)]
    return nn.Sequential(*layers).train()


@pytest.mark.parametrize("amp", ["fp16", "bf16"])
def test_reduced_precision_is_the_reason_only_when_nothing_else_is_found(amp):
    x = torch.zeros(2, 1, 8, 8)
    assert [r.name for r in find_reasons(config(amp=amp), _mlp(False), x, 32, True)] == ["reduced precision"]
    assert [r.name for r in find_reasons(config(amp=amp), _mlp(True), x, 32, True)] == ["BatchNorm"]
    assert [r.name for r in find_reasons(config(), _mlp(False), x, 32, True)] == ["unknown cause"]
    assert [r.name for r in find_reasons(config(), _mlp(False), x, 32, False)] == ["non-finite gradients"]
    textbook = find_reasons(config(amp=amp, reduction="mean_per_micro_batch"), _mlp(False), x, 32, True)
    assert [r.name for r in textbook] == ["textbook weighting"]


def test_a_module_reason_puts_its_own_causes_first_then_those_elsewhere_then_the_model_wide():
    reasons = [Reason("BatchNorm", ("block.norm",), ""), Reason("dropout", ("block.drop", "head.drop"), ""),
               Reason("textbook weighting", (), "")]
    assert module_reason("block.norm", reasons) == "BatchNorm; via dropout; textbook weighting"
    assert module_reason("head", reasons) == "dropout; via BatchNorm; textbook weighting"
    assert module_reason("block.normalise", reasons) == "via BatchNorm, dropout; textbook weighting"
    assert module_reason("", reasons) == "BatchNorm, dropout; textbook weighting"  # the model holds them all


@pytest.mark.parametrize("amp", ["fp16", "bf16"])
def test_reduced_precision_rounds_a_little_and_counts_as_equal(amp):
    report = compare_gradients(config(amp=amp))
    worst = report.table["rel_l2"].max()
    assert 1e-5 < worst < 2e-2  # visible rounding, far below a real difference
    assert report.equal
    assert report.verdict.startswith("equal up to float rounding") and f"{amp} tolerance" in report.verdict


def test_fp16_overflow_of_the_scaled_loss_is_reported_and_backed_off():
    # A summed loss scaled by 65536 overflows fp16 gradients; the GradScaler would halve the scale.
    report = compare_gradients(config(amp="fp16", reduction="sum"))
    assert "overflowed to inf/NaN at loss scale 65536" in report.verdict
    assert "compared at loss scale" in report.verdict
    assert report.equal


def test_mlp_fp32_trains_the_same_either_way():
    frame = train_side_by_side(config(), 10)
    assert list(frame.columns) == SIDE_BY_SIDE_COLUMNS and frame["step"].tolist() == list(range(1, 11))
    assert (frame["weight_distance"] < 1e-5).all()
    assert frame["loss_accum"].tolist() == pytest.approx(frame["loss_big"].tolist(), rel=1e-5)
    assert frame["loss_big"].iloc[-1] < frame["loss_big"].iloc[0]


def test_side_by_side_runs_into_the_next_epoch_through_a_partial_window():
    # digits: 1437 samples = 44 windows of 32 and a last window of 29 (8, 8, 8, 5); step 46 is epoch 1.
    frame = train_side_by_side(config(), 46)
    assert (frame["weight_distance"] < 1e-5).all()
    assert frame["loss_accum"].tolist() == pytest.approx(frame["loss_big"].tolist(), rel=1e-5)


def test_batchnorm_training_drifts_apart():
    frame = train_side_by_side(config(model="cnn_bn", micro_batch_size=2, accum_steps=8), 3)
    assert frame["weight_distance"].iloc[-1] > 1e-4
    assert frame["weight_distance"].iloc[-1] > frame["weight_distance"].iloc[0]


def test_side_by_side_needs_a_step():
    with pytest.raises(ValueError, match="steps=0"):
        train_side_by_side(config(), 0)


def _out_of_memory_above(limit, error):
    """A model builder whose models fail like an allocator does on batches over `limit` samples."""
    real = gaccum_core.models.vision.build_model

    class Limited(nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, x):
            if x.shape[0] > limit:
                raise error
            return self.net(x)

    return lambda *args, **kwargs: Limited(real(*args, **kwargs))


CUDA_OOM = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
CPU_OOM = RuntimeError("[enforce fail at alloc_cpu.cpp:121] DefaultCPUAllocator: can't allocate memory")


@pytest.mark.parametrize("error", [CUDA_OOM, CPU_OOM], ids=["cuda", "cpu"])
def test_a_reference_too_large_names_the_largest_that_fits(monkeypatch, error):
    monkeypatch.setattr(gaccum_core.models.build, "build_model", _out_of_memory_above(20, error))
    cfg = config(micro_batch_size=8, accum_steps=8)  # tries 64, 32, then 16 fits
    assert largest_fitting_effective_batch(cfg) == 16
    with pytest.raises(ReferenceTooLarge) as raised:
        compare_gradients(cfg)
    assert (raised.value.effective_batch, raised.value.largest_fitting) == (64, 16)
    assert "64 samples" in str(raised.value) and "largest that fits is 16 (accum_steps=2)" in str(raised.value)
    with pytest.raises(ReferenceTooLarge, match="largest that fits is 16"):
        train_side_by_side(cfg, 2)


def test_when_not_even_a_micro_batch_fits_the_message_says_so(monkeypatch):
    monkeypatch.setattr(gaccum_core.models.build, "build_model", _out_of_memory_above(4, CUDA_OOM))
    with pytest.raises(ReferenceTooLarge, match="not even one micro-batch fits") as raised:
        compare_gradients(config())
    assert raised.value.largest_fitting == 0
    assert largest_fitting_effective_batch(config()) == 0


def test_other_errors_are_not_mistaken_for_out_of_memory(monkeypatch):
    monkeypatch.setattr(gaccum_core.models.build, "build_model", _out_of_memory_above(20, RuntimeError("shape mismatch")))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        compare_gradients(config(micro_batch_size=8, accum_steps=8))


@pytest.mark.parametrize("compare", [compare_gradients, lambda cfg: train_side_by_side(cfg, 2)],
                         ids=["gradients", "side-by-side"])
def test_a_window_larger_than_the_training_set_is_refused_not_compared_short(compare):
    from gaccum_core.config import ConfigError

    with pytest.raises(ConfigError) as refused:  # digits holds 1437 samples: 6 micro-batches of 256
        compare(config(micro_batch_size=256, accum_steps=64))
    assert refused.value.field == "accum_steps" and refused.value.value == 64
    assert "at most 5 with b = 256" in refused.value.allowed and "16384" in refused.value.allowed
    assert "1437" in refused.value.allowed


def test_progress_counts_the_samples_passed_then_the_steps_trained():
    told = []
    compare_gradients(config(), lambda done, total: told.append((done, total)))
    assert told[-1] == (64, 64) and len(told) == 5  # the big batch of 32, then 4 micro-batches of 8
    assert [done for done, _ in told] == sorted(done for done, _ in told)
    steps = []
    train_side_by_side(config(), 3, lambda done, total: steps.append((done, total)))
    assert steps == [(1, 3), (2, 3), (3, 3)]


def test_the_check_runs_with_the_activation_checkpointing_a_run_would_use(monkeypatch):
    chosen = []
    real = equivalence.checkpoint_blocks
    monkeypatch.setattr(equivalence, "checkpoint_blocks", lambda model, config: chosen.append(real(model, config)))
    config = RunConfig(model="cnn", micro_batch_size=8, accum_steps=4)
    off = compare_gradients(config)
    full = compare_gradients(config.replace(activation_checkpointing="full"))
    assert chosen[0] == 0 and chosen[-1] == 3  # cnn: its three blocks checkpointed, none when off
    assert off.equal and full.equal
    assert full.table["max_abs_diff"].max() == pytest.approx(off.table["max_abs_diff"].max(), abs=1e-7)


@pytest.mark.parametrize("entry", ["compare_gradients", "train_side_by_side"])
def test_the_check_compares_fp32_on_cuda_with_tf32_off_and_restores_it(monkeypatch, entry):
    """On CUDA cuDNN convolutions run in TF32 unless told not to, and may pick another kernel for b than for b·k:
    the check compares IEEE fp32 (the whole comparison, not only the Precision's passes), then gives the flags back."""
    seen = []
    monkeypatch.setattr(equivalence, "resolve_device", lambda name: torch.device("cuda"))  # a GPU's facts, passed in
    for work in ("_compare", "_side_by_side"):
        monkeypatch.setattr(equivalence, work, lambda *args: seen.append(
            (torch.backends.cudnn.conv.fp32_precision, torch.backends.cudnn.allow_tf32)))
    before = torch.backends.cudnn.conv.fp32_precision, torch.backends.cudnn.allow_tf32
    getattr(equivalence, entry)(RunConfig(model="mlp"), *([1] if entry == "train_side_by_side" else []))
    assert seen == [("ieee", False)]
    assert (torch.backends.cudnn.conv.fp32_precision, torch.backends.cudnn.allow_tf32) == before


def test_pg_compares_the_engines_first_window_its_groups_kept_together(rollouts, token_cache_dir, monkeypatch):
    """The check reads the window the engine trains on first: for pg, whole groups in the epoch's order of groups,
    not the first b·k of a permutation of the records (the samples each reads, spied on where batches are built)."""
    batched = []
    real_batch = record_sequences._Records.batch
    monkeypatch.setattr(record_sequences._Records, "batch",
                        lambda self, indices: batched.append(list(map(int, indices))) or real_batch(self, indices))
    pg_config = pg(rollouts, micro_batch_size=2, accum_steps=4)
    Engine(pg_config).run(RowKeeper(), steps=1, evaluate=False)
    trained_first = [i for micro in batched for i in micro]
    batched.clear()
    compare_gradients(pg_config)
    assert batched[0] == trained_first and len(trained_first) == 8
    unordered = epoch_order(len(load_data(pg_config).train), pg_config.seed, 0)[:8].tolist()
    assert sorted(unordered) != sorted(trained_first)  # the records' plain permutation is another window


def test_pg_is_compared_and_trained_on_its_own_loss_aggregated_by_its_mode(rollouts, token_cache_dir, monkeypatch):
    """The check weighs pg's -A·log p as the run does (group-mean-token-mean): side by side, the first step's loss
    is the one the engine logs for that window, both ways; the exact weighting's gradient equals the big batch's,
    the textbook's (each micro-batch aggregated alone) does not."""
    monkeypatch.setattr(engine_module, "sample_text", lambda *args: "")  # the run's last greedy sample: seconds
    pg_config = pg(rollouts, micro_batch_size=2, accum_steps=4, max_steps=1)
    side = train_side_by_side(pg_config, 1)
    _, rows = trained(pg_config)
    assert side.loc[0, "loss_big"] == pytest.approx(rows.steps[0]["loss"], rel=1e-5)
    assert side.loc[0, "loss_accum"] == pytest.approx(rows.steps[0]["loss"], rel=1e-5)
    assert compare_gradients(pg_config).equal
    textbook = compare_gradients(pg_config.replace(reduction="mean_per_micro_batch"))
    assert not textbook.equal and textbook.reasons == ("textbook weighting",)

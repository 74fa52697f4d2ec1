"""check_loop on loops written to make each mistake: each gets its diagnosis, a correct loop passes, randomness is
said first, every split starts from the same state, and bad input is refused in one line."""

import pytest
import torch
from torch import nn

from gaccum_core.lab.mistakes import MISTAKES
from gaccum_core.lab.verdict import TOLERANCES, tolerance_words
from gaccum_core.verify.check import assert_split_invariant, check_loop
from gaccum_core.verify.loop import VerifyError
from gaccum_core.verify.run import VerifyCancelled
from tests.verify import loops


def test_a_correct_loop_passes_on_a_dict_batch_and_matches_its_objective():
    model, batch = loops.token_setup()
    report = check_loop(loops.correct, model, batch, objective=loops.objective)
    assert report.invariant and report.matches_objective and report.passed and report.mistake is None
    assert len(report.splits) == 6 and max(s.difference for s in report.splits) < TOLERANCES["off"]
    assert report.verdict.startswith("split-invariant") and "6 splits" in report.verdict


def test_a_correct_loop_passes_on_a_list_batch():
    model, batch = loops.sample_setup()
    samples = list(zip(batch["x"], batch["y"]))
    report = assert_split_invariant(loops.list_window, model, samples)
    assert report.mistake is None and report.matches_objective is None


@pytest.mark.parametrize("window, mistake, options", [
    (loops.divided_by_k_twice, "divided_by_k_twice", {}),
    (loops.not_divided_by_k, "not_divided_by_k", {}),
    (loops.weighted_equally, "micro_batches_weighted_equally", {}),
    (loops.weighted_by_sample_share, "weighted_by_sample_share", {}),
    (loops.over_fixed_k, "means_over_fixed_k", {"fixed_k": 4}),
    (loops.over_fixed_k, "means_over_fixed_k", {"fixed_k": 4, "objective": loops.objective}),
    (loops.over_fixed_k, "partial_window_over_full_k", {"fixed_k": 4, "splits": [(2, 2, 2, 2), (4, 4), (8,)]}),
    (loops.over_fixed_k, "micro_batches_weighted_equally", {"fixed_k": 4, "splits": [(2, 2, 2, 2), (1, 2, 2, 3)]}),
])
def test_each_mistake_gets_its_diagnosis(window, mistake, options):
    model, batch = loops.token_setup()
    report = check_loop(window, model, batch, **options)
    assert not report.invariant and not report.passed
    assert report.mistake == mistake and report.residual < 10 * TOLERANCES["off"]
    assert MISTAKES[mistake].name in report.verdict and report.fix == MISTAKES[mistake].fix
    assert report.verdict.startswith("not split-invariant") and tolerance_words("off") in report.verdict


def test_a_fixed_k_loop_is_tried_on_a_full_window_first_and_never_on_more():
    model, batch = loops.token_setup()
    report = check_loop(loops.over_fixed_k, model, batch, fixed_k=4)
    assert report.splits[0].sizes == (2, 2, 2, 2) and max(len(s.sizes) for s in report.splits) == 4
    with pytest.raises(VerifyError, match="at most 4 micro-batches"):
        check_loop(loops.over_fixed_k, model, batch, splits=[(1,) * 8], fixed_k=4)


def test_an_invariant_loop_at_half_the_objective_is_a_constant_scale():
    model, batch = loops.token_setup()
    report = check_loop(loops.half_scaled, model, batch, objective=loops.objective)
    assert report.invariant and report.matches_objective is False and not report.passed
    assert report.mistake == "constant_scale" and report.factor == pytest.approx(0.5, rel=1e-4)


def test_an_invariant_loop_of_another_loss_is_said_to_minimise_it():
    model, batch = loops.token_setup()
    report = check_loop(loops.per_sample_means, model, batch, objective=loops.objective)
    assert report.invariant and report.matches_objective is False and report.mistake is None
    assert "no scale of the objective's" in report.verdict and not report.passed


def test_batchnorm_is_split_dependent_and_named():
    model, batch = loops.sample_setup(nn.BatchNorm1d(6))
    report = check_loop(loops.sample_mean, model, batch)
    assert report.mistake == "split_dependent" and "BatchNorm layers '1'" in report.verdict
    assert "not an accumulation error" in report.verdict
    assert all(min(s.sizes) > 1 for s in report.splits)  # BatchNorm1d refuses a micro-batch of one sample


def test_a_loss_that_mixes_samples_is_split_dependent():
    model, batch = loops.sample_setup()
    report = check_loop(loops.centred, model, batch)
    assert report.mistake == "split_dependent" and "outside the span of their own one by one" in report.verdict
    probed = check_loop(loops.centred, model, batch, splits=[(8,), (4, 4), (2, 6), (5, 3)])  # no sample alone
    assert probed.mistake == "split_dependent" and "the first 2 samples' joint gradient" in probed.verdict


def test_a_weighting_no_mistake_predicts_is_not_called_split_dependent():
    model, batch = loops.token_setup()
    report = check_loop(loops.over_k_squared, model, batch)
    assert report.mistake == "unknown_weighting" and "no known mistake fits" in report.verdict
    assert report.fix == MISTAKES["unknown_weighting"].fix


def test_dropout_is_said_first_with_its_layer_and_the_advice():
    model, batch = loops.sample_setup(dropout=0.5)
    report = check_loop(loops.sample_mean, model, batch)
    assert report.mistake == "nondeterministic" and not report.passed and len(report.splits) == 1
    assert report.verdict.startswith("random:") and "'3'" in report.verdict and "model.eval()" in report.fix
    assert check_loop(loops.sample_mean, model.eval(), batch).passed


def test_every_split_starts_from_the_same_weights():
    def steps_after(model, micro_batches):  # an optimizer step left inside the window moves the weights
        loops.sample_mean(model, micro_batches)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(2)

    model, batch = loops.sample_setup()
    before = [p.detach().clone() for p in model.parameters()]
    assert check_loop(steps_after, model, batch).invariant
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters()))  # it did move them


def test_autocast_in_the_window_is_held_to_the_bf16_tolerance():
    def in_bf16(model, micro_batches):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loops.sample_mean(model, micro_batches)

    model, batch = loops.sample_setup()
    report = check_loop(in_bf16, model, batch)
    assert report.precision == "bf16" and report.tolerance == TOLERANCES["bf16"] and report.invariant
    assert tolerance_words("bf16") in report.verdict


def test_progress_is_told_and_a_cancel_stops_it():
    model, batch = loops.token_setup()
    told = []
    check_loop(loops.weighted_equally, model, batch, on_split=lambda done, total: told.append((done, total)))
    assert [done for done, _ in told] == list(range(1, len(told) + 1)) and told[-1][0] == told[-1][1]
    assert len(told) > 7  # the six splits, the repeat, and the diagnosis's own runs
    with pytest.raises(VerifyCancelled):
        check_loop(loops.correct, model, batch, cancelled=lambda: len(told) > 0)


def test_assert_split_invariant_raises_with_the_verdict_and_the_fix():
    model, batch = loops.token_setup()
    with pytest.raises(AssertionError, match="micro-batches weighted equally.*Fix: divide"):
        assert_split_invariant(loops.weighted_equally, model, batch)


def _raises(model, micro_batches):
    raise RuntimeError("shape mismatch\nsecond line")


@pytest.mark.parametrize("window, batch, options, message", [
    (loops.sample_mean, {"x": torch.zeros(1, 4), "y": torch.zeros(1, dtype=torch.long)}, {}, "batch of 1 sample"),
    (loops.sample_mean, {"x": torch.zeros(8, 4), "y": torch.zeros(7, dtype=torch.long)}, {}, r"unequal first.*x: 8, y: 7"),
    (loops.sample_mean, (torch.zeros(8, 4), torch.zeros(8)), {}, "batch of type tuple"),
    (loops.sample_mean, None, {"splits": [(4, 3)]}, "adding up to the batch's 8 samples"),
    (loops.over_fixed_k, None, {"fixed_k": 0}, "fixed_k=0 is not allowed"),
    (loops.over_fixed_k, None, {}, "fixed_k=None is not allowed: the window takes fixed_k"),
    (loops.sample_mean, None, {"fixed_k": 2}, "fixed_k=2 is not allowed: the window takes no fixed_k"),
    (_raises, None, {}, "window raised RuntimeError: shape mismatch on the split 8$"),
    (lambda model, micro: None, None, {}, "left no .grad"),
])
def test_bad_input_is_refused_in_one_line(window, batch, options, message):
    model, default = loops.sample_setup()
    with pytest.raises(VerifyError, match=message) as refused:
        check_loop(window, model, default if batch is None else batch, **options)
    assert "\n" not in str(refused.value)

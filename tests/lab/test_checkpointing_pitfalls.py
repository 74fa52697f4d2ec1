"""The activation-checkpointing traps: each trap's gradient is measurably wrong, the engine's equals the plain one."""

import pandas as pd
import pytest
import torch

from gaccum_core.data.load import load_data
from gaccum_core.lab.pitfalls.catalog import BASE_CONFIG, CHECKPOINTING_PITFALLS, pitfall
from gaccum_core.lab.pitfalls.checkpointing import (DROPOUT_MASKS, REENTRANT, CheckpointingCase, case_words,
                                                    measure, run_checkpointing_pitfalls)
from gaccum_core.models.build import build_seeded_model
from gaccum_core.train.accumulation import epoch_order
from gaccum_core.views.lab import checkpointing_csv, checkpointing_metrics, checkpointing_notes

EXACT = 1e-6  # the engine's checkpointing against no checkpointing: measured 0.0 on both cases


@pytest.fixture(scope="module")
def cases():
    return run_checkpointing_pitfalls()


@pytest.fixture(scope="module")
def batch_and_mlp():
    data = load_data(BASE_CONFIG)
    x, y = data.train.batch(epoch_order(len(data.train), BASE_CONFIG.seed, 0)[:BASE_CONFIG.effective_batch_size])
    return x, y, build_seeded_model(BASE_CONFIG, data.input_shape, data.num_classes)


def test_both_cases_run_in_the_catalog_order_with_two_line_explanations(cases):
    assert list(CHECKPOINTING_PITFALLS) == [REENTRANT, DROPOUT_MASKS] == list(cases)
    for key, case in cases.items():
        assert isinstance(case, CheckpointingCase) and case.key == key
        text = pitfall(key)
        assert len(text.explanation.splitlines()) == 2 and "\n" not in text.fix
        assert "use_reentrant=False" in text.fix
        assert f"one batch of {BASE_CONFIG.effective_batch_size} samples" in case_words(key)
    with pytest.raises(KeyError, match=REENTRANT):
        pitfall("no_such_trap")


def test_reentrant_checkpointing_leaves_the_block_without_a_gradient(cases):
    case = cases[REENTRANT]
    assert case.trap_grad_none and case.trap_block_norm == 0.0
    assert case.reference_block_norm > 0.1  # measured 0.344: the first Linear does get a gradient without it
    assert "None of the inputs have requires_grad=True" in case.warning
    assert case.trap_max_diff > 1e-3  # the block's largest gradient entry, counted against zeros: 4.3e-2
    # Silent: every parameter outside the block gets its gradient, exactly, so the loss still falls.
    assert case.trap_max_diff_outside <= EXACT
    assert (~case.frame["trap_grad_none"] == ~case.frame["in_block"]).all()


def test_recomputing_with_new_dropout_masks_changes_the_gradient(cases):
    case = cases[DROPOUT_MASKS]
    assert not case.trap_grad_none and case.warning == ""
    assert case.trap_max_diff > 1e-3  # measured 2.4e-2
    assert case.trap_block_norm != pytest.approx(case.reference_block_norm, rel=1e-3)
    assert case.trap_max_diff_outside <= EXACT  # the later blocks kept the forward's own activations


@pytest.mark.parametrize("key", [REENTRANT, DROPOUT_MASKS])
def test_the_engines_checkpointing_gives_the_gradient_without_checkpointing(cases, key):
    case = cases[key]
    assert case.right_max_diff <= EXACT
    assert case.frame["right_norm"].tolist() == pytest.approx(case.frame["reference_norm"].tolist(), rel=1e-6)


def test_the_reentrant_trap_is_gone_once_the_input_requires_grad(batch_and_mlp):
    x, y, mlp = batch_and_mlp
    case = measure(REENTRANT, mlp, x.clone().requires_grad_(), y)
    assert not case.trap_grad_none and case.warning == ""
    assert case.trap_max_diff <= EXACT and case.right_max_diff <= EXACT


def test_without_dropout_the_rng_state_does_not_matter(batch_and_mlp):
    x, y, mlp = batch_and_mlp
    case = measure(DROPOUT_MASKS, mlp, x, y)  # the plain mlp: nothing random to recompute
    assert case.trap_max_diff <= EXACT and case.right_max_diff <= EXACT


def test_the_cases_are_reproducible_and_leave_the_global_rng_alone(cases):
    torch.manual_seed(123)
    state = torch.get_rng_state()
    again = run_checkpointing_pitfalls()
    assert torch.equal(torch.get_rng_state(), state)
    for key, case in cases.items():
        pd.testing.assert_frame_equal(again[key].frame, case.frame)


def test_the_figures_and_the_csv_say_what_was_measured(cases):
    (label, value, beside), (right_label, right_value, _) = checkpointing_metrics(cases[REENTRANT])
    assert value == "0 (.grad None)" and "without checkpointing: 0.344" in beside
    assert right_value == "0.0e+00" and "engine" in right_label
    assert ("torch warned", "None of the inputs have requires_grad=True. Gradients will be None") in \
        checkpointing_notes(cases[REENTRANT])
    _, value, _ = checkpointing_metrics(cases[DROPOUT_MASKS])[0]
    assert float(value) > 1e-3
    frame = pd.read_csv(pd.io.common.StringIO(checkpointing_csv(cases.values())))
    assert list(frame["pitfall"].unique()) == list(CHECKPOINTING_PITFALLS)
    assert {"parameter", "in_block", "trap_max_abs_diff", "right_max_abs_diff"} <= set(frame.columns)
    assert (frame.groupby("pitfall")["right_max_abs_diff"].max() <= EXACT).all()

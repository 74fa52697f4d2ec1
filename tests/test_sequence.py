"""The sequence task against its oracle: per-token accumulation equals one big batch; per-micro-batch does not."""

import dataclasses
import math

import pytest
import torch

from gaccum_core.accumulation import plan_epoch
from gaccum_core.config import ConfigError
from gaccum_core.sequence import (PAD, WEIGHTINGS, SequenceConfig, TinyLM, big_batch_reference, collate,
                                  make_sequences, token_loss_sum, train_sequences, weight_distance)

# 38 sequences in windows of 16: 16, 16, then a partial window of 6 (micro-batches of 4 and 2 for b=4),
# which the 4 steps run reach before wrapping into the second epoch.
SMALL = dict(num_sequences=38, steps=4)


def final(run):
    return run.weights[-1]


def seeded_model(seed):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return TinyLM()


@pytest.fixture(scope="module")
def default_runs():
    """The default config's per_token, per_micro_batch and big-batch runs."""
    config = SequenceConfig()
    return {"per_token": train_sequences(config),
            "per_micro_batch": train_sequences(dataclasses.replace(config, weighting="per_micro_batch")),
            "reference": big_batch_reference(config)}


@pytest.mark.parametrize("optimizer,lr", [("sgd", 0.05), ("adam", 3e-3)])
@pytest.mark.parametrize("b,k", [(4, 4), (1, 16)])
def test_per_token_accumulation_equals_big_batch(optimizer, lr, b, k):
    assert plan_epoch(38, b, k, "mean")[-1].samples == 6
    config = SequenceConfig(micro_batch_size=b, accum_steps=k, optimizer=optimizer, lr=lr, **SMALL)
    initial = seeded_model(123)
    before = [p.detach().clone() for p in initial.parameters()]
    accumulated, reference = train_sequences(config, initial), big_batch_reference(config, initial)
    assert len(accumulated.weights) == len(reference.weights) == 4
    for got, want in zip(final(accumulated), final(reference)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert accumulated.losses == pytest.approx(reference.losses, rel=1e-5)
    assert accumulated.grad_norms == pytest.approx(reference.grad_norms, rel=1e-4)
    # Both runs started from `initial`, which neither changed.
    for p, saved in zip(initial.parameters(), before):
        assert torch.equal(p, saved)


def test_per_micro_batch_drifts_from_the_big_batch(default_runs):
    exact = weight_distance(default_runs["per_token"], default_runs["reference"])
    drift = weight_distance(default_runs["per_micro_batch"], default_runs["reference"])
    assert exact < 1e-4
    assert drift > 1e-2
    assert drift > 1000 * exact


@pytest.mark.parametrize("b,k", [(4, 4), (1, 16)])
def test_weightings_agree_when_every_micro_batch_holds_the_same_tokens(b, k):
    # 40 sequences: windows of 16, 16, 8, every micro-batch full. Same config, varied lengths: they differ.
    base = SequenceConfig(micro_batch_size=b, accum_steps=k, num_sequences=40, steps=4)
    for min_len, max_len, agree in [(12, 12, True), (3, 40, False)]:
        config = dataclasses.replace(base, min_len=min_len, max_len=max_len)
        per_token = train_sequences(config)
        per_micro = train_sequences(dataclasses.replace(config, weighting="per_micro_batch"))
        distance = weight_distance(per_micro, per_token)
        assert (distance < 1e-6) if agree else (distance > 1e-2), (min_len, max_len, distance)


def test_a_short_last_micro_batch_is_over_weighted_even_with_equal_lengths():
    # 38 sequences, b=4: the partial window is (4, 2) sequences, so 44 and 22 tokens weighted 1/2 each.
    config = SequenceConfig(min_len=12, max_len=12, **SMALL)
    per_token = train_sequences(config)
    per_micro = train_sequences(dataclasses.replace(config, weighting="per_micro_batch"))
    for got, want in zip(per_micro.weights[1], per_token.weights[1]):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)  # the full windows agree
    assert weight_distance(per_micro, per_token) > 1e-3


def test_sequences_are_deterministic_learnable_and_vary_in_length():
    sequences = make_sequences(256, seed=3)
    again = make_sequences(256, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(sequences, again))
    other = make_sequences(256, seed=4)
    assert not all(len(a) == len(b) and torch.equal(a, b) for a, b in zip(sequences, other))
    lengths = [len(s) for s in sequences]
    assert min(lengths) >= 3 and max(lengths) <= 40
    assert len(set(lengths)) > 25 and max(lengths) - min(lengths) > 30
    for seq in sequences:
        assert seq.dtype == torch.long and int(seq.min()) >= 1 and int(seq.max()) <= 23
        steps = (seq[1:] - seq[:-1]) % 23  # one constant nonzero step: each token follows from the previous two
        assert len(set(steps.tolist())) == 1 and int(steps[0]) != 0


def test_collate_pads_inputs_and_shifts_targets():
    sequences = [torch.tensor([5, 6, 7, 8]), torch.tensor([9, 1]), torch.tensor([2, 4, 6])]
    inputs, targets = collate(sequences)
    assert inputs.shape == targets.shape == (3, 3)
    assert inputs.tolist() == [[5, 6, 7], [9, PAD, PAD], [2, 4, PAD]]
    assert targets.tolist() == [[6, 7, 8], [1, -100, -100], [4, 6, -100]]


def test_padding_never_changes_a_sequences_loss():
    model = seeded_model(0)
    sequences = make_sequences(6, seed=1)
    batch_loss, batch_tokens = token_loss_sum(model, *collate(sequences))
    alone = [token_loss_sum(model, *collate([s])) for s in sequences]
    assert batch_tokens == sum(len(s) - 1 for s in sequences) == sum(n for _, n in alone)
    torch.testing.assert_close(batch_loss, torch.stack([loss for loss, _ in alone]).sum(), atol=1e-4, rtol=1e-5)


def test_per_token_training_learns_the_progressions():
    run = train_sequences(SequenceConfig(steps=30, lr=3e-2))
    assert len(run.losses) == len(run.grad_norms) == len(run.weights) == 30
    assert run.losses[0] > math.log(23) - 0.1  # starts near chance
    # Below log(23), the best any model ignoring context can do: it reads the step from the prefix.
    assert sum(run.losses[-5:]) / 5 < math.log(23) - 1.0
    assert all(math.isfinite(g) and g > 0 for g in run.grad_norms)


def test_weights_are_a_copy_per_step(default_runs):
    run = default_runs["per_token"]
    assert len(run.weights) == 20
    assert not all(torch.equal(a, b) for a, b in zip(run.weights[0], run.weights[-1]))
    for snapshot, live in zip(run.weights[-1], run.model.parameters()):
        assert torch.equal(snapshot, live) and snapshot.data_ptr() != live.data_ptr()


@pytest.mark.parametrize("field,value", [
    ("micro_batch_size", 0), ("micro_batch_size", True), ("micro_batch_size", 2.0), ("accum_steps", 0),
    ("weighting", "mean"), ("optimizer", "adamw"), ("lr", 0.0), ("lr", float("nan")), ("lr", "3e-3"),
    ("num_sequences", 0), ("steps", 0), ("seed", -1), ("min_len", 1), ("max_len", 2),
])
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ConfigError) as info:
        SequenceConfig(**{field: value})
    assert info.value.field == field and field in str(info.value)


def test_config_defaults_and_choices():
    config = SequenceConfig()
    assert config.effective_batch_size == 16 and config.weighting in WEIGHTINGS
    assert SequenceConfig(lr=1).lr == 1.0 and isinstance(SequenceConfig(lr=1).lr, float)


def test_training_leaves_the_global_rng_alone_and_is_reproducible():
    torch.manual_seed(999)
    state = torch.get_rng_state()
    config = SequenceConfig(steps=2)
    first = train_sequences(config)
    big_batch_reference(config)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(5)  # a different global state must not change the run
    second = train_sequences(config)
    for a, b in zip(final(first), final(second)):
        assert torch.equal(a, b)

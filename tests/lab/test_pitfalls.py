"""The pitfall gallery: each classic bug lands measurably off the big batch; the correct loop does not."""

import math
import random

import pandas as pd
import pytest
import torch

from gaccum_core.train.accumulation import epoch_order, plan_epoch
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.lab.pitfalls.catalog import BASE_CONFIG, PITFALLS
from gaccum_core.lab.pitfalls.harness import run_all, run_pitfall
from gaccum_core.lab.pitfalls.result import PitfallResult

K = BASE_CONFIG.accum_steps
ORDER = ["step_when_i_mod_k_is_0", "zero_grad_before_step", "mean_without_dividing_by_k", "lr_divided_by_k",
         "partial_window_divided_by_k", "mean_of_means_sequences", "batchnorm_small_micro_batches",
         "scheduler_per_micro_batch", "scaler_update_inside_window"]
SEQUENCES = "mean_of_means_sequences"
COLUMNS = ["step", "distance_pitfall", "distance_correct", "grad_norm_ratio", "loss_pitfall", "loss_correct"]


@pytest.fixture(scope="module")
def gallery():
    return run_all()


@pytest.fixture(scope="module")
def results(gallery):
    return {result.key: result for result in gallery}


def test_run_all_returns_the_nine_pitfalls_in_the_documented_order(gallery):
    assert list(PITFALLS) == ORDER
    assert [r.key for r in gallery] == ORDER
    for result in gallery:
        assert isinstance(result, PitfallResult)
        assert list(result.frame.columns[:6]) == COLUMNS
        assert result.frame["step"].tolist() == list(range(1, 21))
        pitfall = PITFALLS[result.key]
        assert len(pitfall.explanation.splitlines()) == 2 and "\n" not in pitfall.fix


@pytest.mark.parametrize("key", ORDER)
def test_the_pitfall_is_far_from_the_big_batch_and_the_correct_loop_is_not(results, key):
    result = results[key]
    assert result.final_distance_pitfall > 1e-3
    if PITFALLS[key].default.get("amp") == "fp16":
        # fp16 GEMMs round a batch of 8 and one of 32 differently: the correct side is close, not exact.
        assert result.final_distance_correct < 0.05
        assert result.final_distance_pitfall > 50 * result.final_distance_correct
    else:
        assert result.frame["distance_correct"].max() < 1e-5
        assert result.final_distance_pitfall > 100 * result.final_distance_correct


def test_i_mod_k_steps_after_one_micro_batch_then_windows_shift(results):
    frame = results["step_when_i_mod_k_is_0"].frame
    b = BASE_CONFIG.micro_batch_size
    assert frame["samples_pitfall"].tolist()[:4] == [b, b * K, b * K, b * K]
    assert frame["distance_pitfall"].iloc[0] > 1e-3  # wrong from the very first step


def test_zero_grad_before_step_leaves_nothing_to_apply(results):
    result = results["zero_grad_before_step"]
    assert (result.frame["grad_norm_ratio"] == 0).all()
    # The weights never moved, so the distance is how far the reference travelled: it only grows.
    assert result.frame["distance_pitfall"].is_monotonic_increasing


def test_zero_grad_before_scaler_step_raises_under_fp16():
    with pytest.raises(AssertionError, match="No inf checks"):
        run_pitfall("zero_grad_before_step", steps=1, amp="fp16")


def test_mean_without_dividing_by_k_makes_the_gradient_k_times_too_large(results):
    result = results["mean_without_dividing_by_k"]
    assert result.frame["grad_norm_ratio"].iloc[0] == pytest.approx(K, rel=1e-5)  # same weights at step 1
    assert result.grad_norm_ratio == pytest.approx(K, rel=0.1)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_lr_divided_by_k_is_exact_for_sgd_without_weight_decay(momentum):
    result = run_pitfall("lr_divided_by_k", optimizer="sgd", lr=0.05, momentum=momentum)
    assert result.grad_norm_ratio == pytest.approx(K, rel=1e-5)  # k x the gradient, times lr / k
    assert result.frame["distance_pitfall"].max() < 1e-5


def test_lr_divided_by_k_is_wrong_for_adam_and_for_weight_decay(results):
    assert results["lr_divided_by_k"].final_distance_pitfall > 0.1  # the default: Adam
    decayed = run_pitfall("lr_divided_by_k", optimizer="sgd", lr=0.05, weight_decay=0.01)
    assert decayed.final_distance_pitfall > 1e-3


def test_partial_window_is_under_weighted_only_where_it_is_partial(results):
    frame = results["partial_window_divided_by_k"].frame
    partial = frame["samples_pitfall"] < BASE_CONFIG.effective_batch_size
    assert frame.loc[partial, "step"].tolist() == [10, 20]  # 304 samples: 9 windows of 32, one of 16
    first, second = frame.loc[partial, "grad_norm_ratio"]
    assert first == pytest.approx(0.5, rel=1e-5)  # same weights until then: exactly half
    assert second == pytest.approx(0.5, rel=0.1)
    assert frame["distance_pitfall"].iloc[:9].max() < 1e-5 < frame["distance_pitfall"].iloc[9]


def test_scheduler_per_micro_batch_is_off_from_the_first_step(results):
    frame = results["scheduler_per_micro_batch"].frame
    assert frame["distance_pitfall"].iloc[0] > 1e-3  # lr (1 + k) / 21 instead of 1 / 21 at step 1


def test_scaler_update_inside_window_overflows_where_the_reference_does_not(results):
    ratios = results["scaler_update_inside_window"].frame["grad_norm_ratio"]
    assert (ratios == math.inf).sum() >= 2  # skipped windows: the reference's gradients stayed finite
    assert results["scaler_update_inside_window"].grad_norm_ratio < 0.9


def test_scaler_update_inside_window_mis_weights_even_without_overflow():
    result = run_pitfall("scaler_update_inside_window", init_scale=16.0, growth_interval=5)
    assert result.frame["grad_norm_ratio"].map(math.isfinite).all()  # the mixed scales alone
    assert result.grad_norm_ratio < 0.9
    assert result.final_distance_pitfall > 20 * result.final_distance_correct


def test_overrides_are_validated_and_the_thread_count_is_left_alone():
    # The gallery runs beside training in the dashboard: it must not change torch's global threads.
    threads = torch.get_num_threads()
    with pytest.raises(KeyError, match="unknown pitfall"):
        run_pitfall("no_such_bug")
    with pytest.raises(ConfigError, match="micro_batch"):
        run_pitfall("step_when_i_mod_k_is_0", micro_batch=4)
    with pytest.raises(ConfigError, match="train_samples"):
        run_pitfall("partial_window_divided_by_k", train_samples=10**6)
    with pytest.raises(ConfigError, match="reduction"):
        run_pitfall("mean_of_means_sequences", reduction="sum")
    assert torch.get_num_threads() == threads


# #6 runs on the engine: gpt (tiny) on pydoc cut into chunks of 257 bytes, b=1, k=4, SGD. Each document's
# last chunk is short, so some windows hold fewer target tokens than 4 x 256, spread unevenly over their
# micro-batches: there the mean of per-micro-batch means weights the tokens of a short chunk up.


def _window_tokens(steps: int = 20) -> list[list[int]]:
    """Target tokens of each micro-batch of the default #6 run's first windows, read from the data."""
    config = RunConfig.from_dict({**BASE_CONFIG.to_dict(), **PITFALLS[SEQUENCES].default})
    train = load_data(config).train
    order = epoch_order(len(train), config.seed, 0)
    windows = plan_epoch(len(train), config.micro_batch_size, config.accum_steps)[:steps]
    return [[int(train.targets[order[m.start:m.stop]].sum()) for m in w.micro_batches] for w in windows]


def test_the_engine_accumulates_sequences_exactly_and_the_mean_of_means_does_not(results):
    result = results[SEQUENCES]
    # Measured: the exact loop stays within 7e-7 of one big batch (L2 over all 0.13 M weights) for all
    # 20 steps; the textbook mean_per_micro_batch ends 0.11 away, about 2e5 times farther.
    assert result.frame["distance_correct"].max() < 1e-5
    assert result.final_distance_pitfall > 0.05
    assert result.final_distance_pitfall > 10**4 * result.final_distance_correct
    losses = result.frame["loss_correct"]
    assert losses.iloc[0] == pytest.approx(math.log(256), abs=0.1)  # a byte-level model starts at chance
    assert losses.iloc[-1] < math.log(256) - 1.5  # and learns: the comparison is not of a model standing still


def test_the_mean_of_means_is_exact_until_a_window_whose_micro_batches_differ_in_tokens(results):
    frame = results[SEQUENCES].frame
    tokens = _window_tokens()
    uneven = [len(set(counts)) > 1 for counts in tokens]
    first = uneven.index(True)
    assert first >= 1 and sum(uneven) >= 3, tokens  # the default settings show both kinds of window
    # Before it the two weightings are one number apart only in name: count * k == the window's count.
    assert frame["distance_pitfall"].iloc[:first].max() < 1e-5
    assert frame["grad_norm_ratio"].iloc[:first].tolist() == pytest.approx([1.0] * first, rel=1e-5)
    assert frame["distance_pitfall"].iloc[first] > 1e-3


def _text_file(path, lengths):
    letters = random.Random(0)
    paragraphs = ["".join(letters.choice("abcdefghij") for _ in range(n)) for n in lengths]
    path.write_text("\n\n".join(paragraphs), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("equal", [True, False])
def test_the_mean_of_means_is_exact_exactly_when_every_micro_batch_holds_the_same_tokens(tmp_path, equal):
    # 40 paragraphs, each one sequence (max_seq_len 64); 36 train, so windows of 8: four full and a partial
    # one of 2 micro-batches; 7 steps run into the second epoch. Equal lengths: every micro-batch holds 128
    # target tokens. Varied lengths (12 to 65 bytes): they differ, and so do the two weightings.
    lengths = [65] * 40 if equal else [12 + (n * 7) % 54 for n in range(40)]
    result = run_pitfall(SEQUENCES, steps=7, dataset="text", text_file=_text_file(tmp_path / "t.txt", lengths),
                         max_seq_len=64, micro_batch_size=2, accum_steps=4)
    assert result.frame["distance_correct"].max() < 1e-5
    if equal:
        # Exact over the four full windows; the partial fifth (2 micro-batches) is divided by k=4 as the
        # tutorials do, so it counts half: the textbook weighting departs there even with equal tokens.
        assert result.frame["distance_pitfall"].iloc[:4].max() < 1e-5
        assert result.frame["distance_pitfall"].iloc[4] > 1e-3
    else:
        assert result.final_distance_pitfall > 1e-3


@pytest.mark.parametrize("field,value", [
    ("reduction", "sum"), ("max_steps", 5), ("epochs", 2), ("nproc", 2), ("train_samples", 100),
    ("micro_batch", 4), ("micro_batch_size", 0), ("micro_batch_size", 1000), ("lr", float("nan")),
    ("model", "mlp"), ("dataset", "digits"), ("max_seq_len", 257), ("gpt_preset", "huge"),
])
def test_the_sequence_pitfalls_bad_settings_name_one_field(field, value):
    with pytest.raises(ConfigError) as info:
        run_pitfall(SEQUENCES, steps=1, **{field: value})
    assert info.value.field == field and field in str(info.value)


def test_the_sequence_pitfall_is_reproducible_and_leaves_the_global_rng_alone(results):
    torch.manual_seed(999)
    state = torch.get_rng_state()
    again = run_pitfall(SEQUENCES, steps=2)
    assert torch.equal(torch.get_rng_state(), state)
    pd.testing.assert_frame_equal(again.frame, results[SEQUENCES].frame.iloc[:2])


def test_each_case_says_what_it_trains_from_the_settings_it_runs_with():
    from gaccum_core.lab.pitfalls.catalog import case_config, setup_words

    for key in PITFALLS:
        config, words = case_config(key), setup_words(key)
        assert words.startswith(config.model) and f" on {config.dataset}," in words, words
        assert f"b={config.micro_batch_size}, k={config.accum_steps}, {config.optimizer} lr {config.lr:g}" in words
    assert "adam lr 0.001" in setup_words("lr_divided_by_k")
    assert "the first 304 training samples" in setup_words("partial_window_divided_by_k")
    assert "the correct column: model cnn_gn" in setup_words("batchnorm_small_micro_batches")
    assert case_config("lr_divided_by_k", optimizer="sgd").optimizer == "sgd"


def test_the_lr_over_k_text_says_what_its_demo_shows(results):
    # The demo runs Adam: its steps come out about k times too small; SGD alone would be exact.
    demo, text = case_config_of("lr_divided_by_k"), PITFALLS["lr_divided_by_k"].explanation
    assert demo.optimizer == "adam" and text.startswith("Here with Adam") and "k x too small" in text
    assert results["lr_divided_by_k"].final_distance_pitfall > 0.1


def case_config_of(key):
    from gaccum_core.lab.pitfalls.catalog import case_config

    return case_config(key)

"""The splits verify tries: `--splits` parsed with one-line refusals, and the default set the issue lists."""

import pytest

from gaccum_core.verify.loop import VerifyError
from gaccum_core.verify.splits import default_splits, parse_splits, within_fixed_k


def test_splits_are_parsed_between_slashes_and_commas():
    assert parse_splits("12/6,6/1,11", 12) == [(12,), (6, 6), (1, 11)]
    assert parse_splits("6,6/6,6", 12) == [(6, 6)]  # a repeat is tried once


@pytest.mark.parametrize("text, message", [
    ("6,x", "positive integers separated by commas.*'6,x' is not"),
    ("", "'' is not"),
    ("6,5", "adding up to the batch's 12 samples; '6,5' adds up to 11"),
    ("12,0", "sizes ≥ 1"),
    ("-1,13", "sizes ≥ 1"),
])
def test_bad_splits_are_refused_in_one_line(text, message):
    with pytest.raises(VerifyError, match=message) as refused:
        parse_splits(text, 12)
    assert "\n" not in str(refused.value) and str(refused.value).startswith(f"splits={text!r} is not allowed")


def test_the_default_splits_are_the_issues_list():
    splits = default_splits(8)
    assert splits[:5] == [(8,), (4, 4), (1, 7), (7, 1), (1,) * 8]
    three = splits[5:]
    assert len(three) == 1 and len(three[0]) == 3 and sum(three[0]) == 8 and len(set(three[0])) > 1
    assert default_splits(8) == splits  # seeded
    assert (1,) * 17 not in default_splits(17) and default_splits(17)[1] == (8, 9)
    assert default_splits(2) == [(2,), (1, 1)]  # halves, [1, B-1] and one each coincide; no three-way split


def test_a_fixed_k_keeps_splits_of_at_most_k_and_puts_a_full_window_first():
    assert within_fixed_k(default_splits(8), 4, 8)[:4] == [(2, 2, 2, 2), (8,), (4, 4), (1, 7)]
    assert all(len(split) <= 4 for split in within_fixed_k(default_splits(8), 4, 8))
    assert within_fixed_k([(3,), (1, 2)], 3, 3) == [(1, 1, 1), (3,), (1, 2)]
    assert within_fixed_k([(7,), (3, 4)], 3, 7)[0] == (3, 2, 2)

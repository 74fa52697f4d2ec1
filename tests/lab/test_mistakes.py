"""The one catalog of mistakes: every pitfall that names a mistake names one of it, and each has its words."""

import pytest

from gaccum_core.lab.mistakes import MISTAKES, mistake
from gaccum_core.lab.pitfalls.catalog import (CHECKPOINTING_PITFALLS, CUDA_PITFALLS, FSDP_PITFALLS, PITFALLS,
                                              REPORT_PITFALLS)


def test_each_named_mistake_is_in_the_catalog():
    galleries = (PITFALLS, FSDP_PITFALLS, CHECKPOINTING_PITFALLS, CUDA_PITFALLS, REPORT_PITFALLS)
    named = {p.key: p.mistake for gallery in galleries for p in gallery.values() if p.mistake}
    assert named, "no pitfall names its mistake"
    assert {key: m for key, m in named.items() if m not in MISTAKES} == {}


def test_each_mistake_says_what_it_predicts_and_the_fix():
    for key, m in MISTAKES.items():
        assert m.key == key and m.name and m.prediction and m.fix
        assert all(" #" in report and "/" in report for report in m.reports)


def test_an_unknown_mistake_lists_the_known_ones():
    with pytest.raises(KeyError, match="divided_by_k_twice"):
        mistake("nope")

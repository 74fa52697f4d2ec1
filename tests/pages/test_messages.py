"""A refusal in the page's words, one function for every page: the control's label, the value, what is allowed."""

import pytest

from dashboard.messages import explain, in_page_words
from gaccum_core.config import DEFAULT_RUN, ConfigError, RunConfig, problems

LABELS = {"model": "Model", "dataset": "Dataset", "lr": "Learning rate", "amp": "Mixed precision",
          "text_file": "Text file", "sync_every_micro_batch": "All-reduce after every micro-batch"}


def test_a_refused_value_is_named_by_its_label_with_what_is_allowed():
    (exc,) = problems({**DEFAULT_RUN.to_dict(), "lr": 0.0}).values()
    assert explain(exc, LABELS) == "Learning rate = 0.0 is not allowed: a finite number > 0 and ≤ 1000"


def test_settings_that_only_make_sense_together_say_what_to_do():
    exc = problems({**DEFAULT_RUN.to_dict(), "model": "gpt", "dataset": "digits"})["dataset"]
    assert explain(exc, LABELS).endswith("Pick pydoc (bundled) or text (your own file) under Dataset, "
                                         "or an image model under Model")


def test_empty_boxes_say_what_to_type_or_choose():
    assert explain(ConfigError("model", "", "anything"), LABELS).startswith("Your model is empty: type timm:NAME")
    assert explain(ConfigError("amp", "", "one or more of off, fp16, bf16"), LABELS) == \
        "Mixed precision is empty: choose one or more of off, fp16, bf16"
    with pytest.raises(ConfigError) as refused:
        RunConfig(model="gpt", dataset="text", text_file="")
    assert explain(refused.value, LABELS).startswith("Text file is empty: choose the path of")


def test_a_field_without_a_control_keeps_the_core_words_and_field_names_become_labels():
    exc = ConfigError("seed", -1, "an integer from 0")
    assert explain(exc, LABELS) == str(exc)
    words = in_page_words("set sync_every_micro_batch to False, or pass --lr (CLI) or tick 'amp' (UI)", LABELS)
    assert words == "set 'All-reduce after every micro-batch' to False, or tick 'Mixed precision'"

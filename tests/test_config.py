"""RunConfig: validation messages name the field, the value and what is allowed; JSON round trip."""

import dataclasses
import math

import pytest

from gaccum_core.config import CHOICES, ConfigError, RunConfig

# The str fields that take any value of their form (a model or data set name, your own, a device, a path),
# each checked by its own rule; every other str field takes one of a fixed set, listed in CHOICES.
OPEN_FIELDS = {"model", "dataset", "device", "data_dir", "text_file", "text_field", "prompt_field", "completion_field",
               "advantage_field", "group_field",
               "cache_dir", "weights_file"}


def test_defaults_are_valid_and_round_trip_through_json():
    cfg = RunConfig(model="cnn", accum_steps=8, amp="bf16", lr=0.01)
    assert RunConfig.from_json(cfg.to_json()) == cfg
    assert cfg.effective_batch_size == 32 * 8


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunConfig().lr = 1.0


@pytest.mark.parametrize("field,value,allowed", [
    ("micro_batch_size", 0, "from 1"),
    ("micro_batch_size", -4, "from 1"),
    ("micro_batch_size", 10**9, "to 65536"),
    ("micro_batch_size", "8", "type int"),
    ("micro_batch_size", 8.5, "type int"),
    ("accum_steps", 0, "from 1"),
    ("lr", 0.0, "> 0"),
    ("lr", -0.1, "> 0"),
    ("lr", math.nan, "finite"),
    ("lr", math.inf, "finite"),
    ("reduction", "avg", "mean, sum"),
    ("amp", "fp8", "off, fp16, bf16"),
    ("clear_cache", "always", "off, step, micro"),
    ("compile", "fast", "reduce-overhead"),
    ("optimizer", "lion", "sgd, adam, adamw"),
    ("model", "gpt2", "resnet18"),
    ("dataset", "imagenet", "digits"),
    ("device", "tpu", "cuda:N"),
    ("momentum", 1.0, "below 1"),
    ("grad_clip", -1.0, "≥ 0"),
    ("image_size", 5000, "to 1024"),
])
def test_bad_values_name_field_value_and_allowed(field, value, allowed):
    with pytest.raises(ConfigError) as info:
        RunConfig(**{field: value})
    message = str(info.value)
    assert field in message and repr(value) in message and allowed in message
    assert info.value.field == field


def test_every_str_field_is_open_or_takes_one_of_its_choices():
    str_fields = {f.name for f in dataclasses.fields(RunConfig) if f.type == "str"}
    assert set(CHOICES) == str_fields - OPEN_FIELDS and "gpt_preset" in CHOICES
    for name, allowed in CHOICES.items():
        assert getattr(RunConfig(), name) in allowed
        with pytest.raises(ConfigError, match="one of " + ", ".join(allowed)):
            RunConfig(**{name: "no-such-value"})


def test_unknown_and_malformed_json_are_config_errors():
    with pytest.raises(ConfigError, match="colour"):
        RunConfig.from_dict({"colour": "red"})
    with pytest.raises(ConfigError, match="valid JSON"):
        RunConfig.from_json("{not json")
    with pytest.raises(ConfigError, match="JSON object"):
        RunConfig.from_json("[1, 2]")


def test_ints_are_accepted_for_float_fields():
    assert RunConfig(lr=1).lr == 1.0 and isinstance(RunConfig(lr=1).lr, float)


def test_problems_names_every_refused_field_each_in_its_own_words():
    from gaccum_core.config import problems

    found = problems({"lr": 0.0, "accum_steps": 0, "momentum": 1.0, "model": "gpt9", "epochs": 2})
    assert set(found) == {"lr", "accum_steps", "momentum", "model"}
    for field, exc in found.items():
        assert exc.field == field and field in str(exc)
    assert "1 to 65536" in found["accum_steps"].allowed and "below 1" in found["momentum"].allowed
    assert problems({"lr": 0.01, "epochs": 2}) == {}


def test_problems_keeps_a_refusal_that_needs_two_fields_and_finds_the_rest():
    from gaccum_core.config import problems

    found = problems({"model": "gpt", "dataset": "digits", "lr": -1.0, "data_dir": " "})
    assert set(found) == {"dataset", "lr", "data_dir"} and "text data set" in found["dataset"].allowed

"""Models: built-ins and torchvision models take dataset batches, build deterministically, fail clearly."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from gaccum_core import config
from gaccum_core.models import (BUILTIN_MODELS, MODEL_NAMES, InputAdapter, ModelInputError,
                                build_model, model_input_size)

DIGITS = (1, 8, 8)


def _batch(shape: tuple[int, int, int] = DIGITS, n: int = 2) -> torch.Tensor:
    return torch.randn(n, *shape, generator=torch.Generator().manual_seed(0))


def test_model_names_match_config() -> None:
    assert MODEL_NAMES == config.MODELS


@pytest.mark.parametrize("name", BUILTIN_MODELS)
def test_builtin_gives_logits_and_gradients(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(name, DIGITS, 10)
    logits = model(_batch(n=5))
    assert logits.shape == (5, 10)
    logits.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("name", BUILTIN_MODELS)
def test_same_seed_same_weights(name: str) -> None:
    torch.manual_seed(7)
    first = build_model(name, DIGITS, 10).state_dict()
    torch.manual_seed(7)
    second = build_model(name, DIGITS, 10).state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_builtins_have_no_dropout_and_no_adapter_on_native_size() -> None:
    for name in BUILTIN_MODELS:
        model = build_model(name, DIGITS, 10)
        assert not any(isinstance(m, (nn.Dropout, InputAdapter)) for m in model.modules())
    assert isinstance(build_model("mlp", DIGITS, 10), nn.Sequential)


def test_norm_variants() -> None:
    bn = build_model("cnn_bn", DIGITS, 10)
    gn = build_model("cnn_gn", DIGITS, 10)
    plain = build_model("cnn", DIGITS, 10)
    assert any(isinstance(m, nn.BatchNorm2d) for m in bn.modules())
    assert any(isinstance(m, nn.GroupNorm) for m in gn.modules())
    assert not any(isinstance(m, nn.BatchNorm2d) for m in gn.modules())
    assert not any(isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)) for m in plain.modules())


def test_builtin_resizes_when_image_size_is_set() -> None:
    model = build_model("mlp", DIGITS, 10, image_size=16)
    assert model_input_size("mlp", DIGITS, 16) == 16
    assert isinstance(model[0], InputAdapter)
    assert model(_batch()).shape == (2, 10)
    assert build_model("cnn", (3, 32, 32), 4)(_batch((3, 32, 32))).shape == (2, 4)


def test_adapter_repeats_one_channel_and_resizes() -> None:
    out = InputAdapter(size=32, to_rgb=True)(_batch())
    assert out.shape == (2, 3, 32, 32)
    assert torch.equal(out[:, 0], out[:, 2])


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small"])
def test_torchvision_model_on_digits_at_32(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(name, DIGITS, 10, image_size=32)
    assert model.training  # the probe restores train mode
    adapter = model[0]
    assert isinstance(adapter, InputAdapter) and adapter.size == 32 and adapter.to_rgb
    logits = model(_batch())
    assert logits.shape == (2, 10)
    logits.sum().backward()


@pytest.mark.parametrize("name", ["efficientnet_b0", "resnet50"])
def test_larger_torchvision_models_build_and_run_at_32(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(name, DIGITS, 10, image_size=32).eval()
    with torch.no_grad():
        assert model(_batch()).shape == (2, 10)


def test_torchvision_build_is_deterministic() -> None:
    torch.manual_seed(3)
    first = build_model("resnet18", DIGITS, 10, image_size=32).state_dict()
    torch.manual_seed(3)
    second = build_model("resnet18", DIGITS, 10, image_size=32).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_vit_on_native_digits_explains_the_patch_size() -> None:
    with pytest.raises(ModelInputError, match="16"):
        build_model("vit_b_16", DIGITS, 10)
    with pytest.raises(ModelInputError, match="multiple of 16"):
        build_model("vit_b_16", (3, 32, 32), 10, image_size=40)


def test_vit_at_32_runs() -> None:
    start = time.perf_counter()
    torch.manual_seed(0)
    model = build_model("vit_b_16", DIGITS, 10, image_size=32).eval()
    with torch.no_grad():
        assert model(_batch()).shape == (2, 10)
    assert time.perf_counter() - start < 10


def test_probe_turns_a_shape_failure_into_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def too_small(*args: object, **kwargs: object) -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, 10, 5), nn.Flatten())  # fails below 5×5

    monkeypatch.setattr("torchvision.models.get_model", too_small)
    with pytest.raises(ModelInputError, match=r"resnet18 .*3×4×4.*image_size"):
        build_model("resnet18", (1, 4, 4), 10)


def test_unknown_model_and_odd_channels_are_refused() -> None:
    with pytest.raises(ValueError, match="model='nope'"):
        build_model("nope", DIGITS, 10)
    with pytest.raises(ModelInputError, match="1- or 3-channel"):
        build_model("resnet18", (2, 8, 8), 10)

"""Models: built-ins and torchvision models take dataset batches, build deterministically, fail clearly."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gaccum_core import config
from gaccum_core.models.vision import (BUILTIN_MODELS, InputAdapter, ModelInputError,
                                build_model, model_input_size)

DIGITS = (1, 8, 8)


def _batch(shape: tuple[int, int, int] = DIGITS, n: int = 2) -> torch.Tensor:
    return torch.randn(n, *shape, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", [m for m in config.MODELS if m not in config.TEXT_MODELS])
def test_every_configured_model_builds_and_gives_logits(name: str) -> None:
    """Every name the config accepts must build, untrained, and map a digits batch to logits
    (torchvision models at 32×32, the smallest size they all take; ~2 s for all on one core)."""
    torch.manual_seed(0)
    image_size = 0 if name in BUILTIN_MODELS else 32
    model = build_model(name, DIGITS, 10, image_size=image_size).eval()
    with torch.no_grad():
        assert model(_batch()).shape == (2, 10)


def test_an_unknown_model_is_refused_naming_every_choice() -> None:
    with pytest.raises(config.ConfigError, match="model='gpt9'"):
        config.RunConfig(model="gpt9")
    for check in (lambda: build_model("gpt9", DIGITS, 10), lambda: model_input_size("gpt9", DIGITS, 0)):
        with pytest.raises(ValueError) as info:
            check()
        message = str(info.value)
        assert "model='gpt9'" in message and all(name in message for name in config.MODELS), message


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


def test_vit_is_built_for_the_chosen_image_size() -> None:
    # Its position embedding is sized for image_size: 32 gives (32/16)^2 patches + the class token.
    model = build_model("vit_b_16", DIGITS, 10, image_size=32)
    assert model.adapter.size == 32 and model.adapter.to_rgb
    assert model.net.image_size == 32 and model.net.encoder.pos_embedding.shape[1] == 5


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


@pytest.mark.parametrize("preset,millions", [("tiny", 0.133), ("mini", 0.892), ("small", 11.14), ("gpt2", 86.04)])
def test_gpt_presets_build_with_their_sizes(preset: str, millions: float) -> None:
    from gaccum_core.models.gpt import build_gpt

    torch.manual_seed(0)
    model = build_gpt(preset)
    assert sum(p.numel() for p in model.parameters()) / 1e6 == pytest.approx(millions, rel=0.02)
    if preset == "tiny":
        ids = torch.randint(1, 256, (2, 12))
        assert model(ids).shape == (2, 12, 256)


def test_gpt_is_causal_so_right_padding_never_reaches_a_real_token() -> None:
    from gaccum_core.models.gpt import build_gpt

    torch.manual_seed(0)
    model = build_gpt("tiny").eval()
    ids = torch.randint(1, 256, (1, 10))
    padded = torch.cat([ids[:, :6], torch.zeros(1, 4, dtype=torch.long)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(ids)[:, :6], model(padded)[:, :6], rtol=0, atol=0)


def test_the_preset_parameter_counts_are_the_models():
    from gaccum_core.models.gpt import build_gpt
    from gaccum_core.presets import GPT_PRESETS

    for preset in ("tiny", "mini"):
        assert GPT_PRESETS[preset].parameters == sum(p.numel() for p in build_gpt(preset).parameters())

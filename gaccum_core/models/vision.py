"""Models by name, adapted to take a dataset's (N, C, H, W) batches and return (N, classes) logits.

Built-ins are tiny, dropout-free and take the dataset's own channels. Torchvision models are built
untrained (weights are never downloaded) and get 3-channel input at the chosen image_size; they and timm's
start from your weights file where one is given (pretrained).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from gaccum_core.config import MODELS, is_factory, is_timm
from gaccum_core.words import first_line
from gaccum_core.models.factory import build_factory_model
from gaccum_core.models.pretrained import load_torchvision, weights_origin
from gaccum_core.models.timm_zoo import build_timm

MODEL_NAMES = MODELS  # one list of names, owned by the config that validates them
BUILTIN_MODELS = ("mlp", "cnn", "cnn_bn", "cnn_gn")
VIT_PATCH = 16


class ModelInputError(ValueError):
    """A model cannot take the dataset's images at the chosen size."""


class InputAdapter(nn.Module):
    """Resizes (N, C, H, W) to (N, C, size, size) and/or repeats one channel to three."""

    def __init__(self, size: int = 0, to_rgb: bool = False) -> None:
        super().__init__()
        self.size = size  # 0 = keep H and W
        self.to_rgb = to_rgb

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The batch as the wrapped model expects it."""
        if self.size and x.shape[-2:] != (self.size, self.size):
            x = F.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False)
        if self.to_rgb and x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)  # a view: resizing first keeps the interpolation 1-channel
        return x

    def extra_repr(self) -> str:
        return f"size={self.size}, to_rgb={self.to_rgb}"


def model_input_size(name: str, input_shape: tuple[int, int, int], image_size: int) -> int:
    """The H (= W) the model will see: image_size if set, else the dataset's own height."""
    _check_name(name)  # a non-square input is resized to this square, so H = W always
    return image_size if image_size > 0 else input_shape[1]


def build_model(name: str, input_shape: tuple[int, int, int], num_classes: int,
                image_size: int = 0, weights_file: str = "") -> nn.Module:
    """A model taking (N, *input_shape) float batches, untrained or from weights_file (a timm or torchvision
    model; its `origin` says which file, and any classifier reset); seed torch before calling."""
    size = model_input_size(name, input_shape, image_size)
    channels, height, width = input_shape
    # timm (in_chans) and your factory (input_shape) take the data set's channels as they are.
    builtin = name in BUILTIN_MODELS or is_timm(name) or is_factory(name)
    if not builtin and channels not in (1, 3):
        raise ModelInputError(f"{name} takes 1- or 3-channel images; the input is "
                              f"{_dims(input_shape)}: use a built-in model ({', '.join(BUILTIN_MODELS)})")
    reset = ""
    if is_timm(name):
        net, reset = build_timm(name, channels, size, num_classes, weights_file)
    elif is_factory(name):
        net = build_factory_model(name, (channels, size, size), num_classes)
    elif builtin:
        net = _build_builtin(name, channels, size, num_classes)
    else:
        net = _build_torchvision(name, input_shape, size, num_classes)
        reset = load_torchvision(net, weights_file, name, num_classes) if weights_file else ""
    adapter = InputAdapter(size=size if (height, width) != (size, size) else 0,
                           to_rgb=not builtin and channels == 1)
    model = net if not adapter.size and not adapter.to_rgb else nn.Sequential(OrderedDict(adapter=adapter, net=net))
    if weights_file:  # adapted or not (no extra module on the hot path when nothing is), its weights are the file's
        model.origin = weights_origin(weights_file, reset)
    return model


def _check_name(name: str) -> None:
    if name not in MODEL_NAMES and not is_timm(name) and not is_factory(name):
        raise ValueError(f"model={name!r} is not allowed: one of {', '.join(MODEL_NAMES)}")


def _dims(shape: tuple[int, ...]) -> str:
    return "×".join(str(d) for d in shape)


def _build_builtin(name: str, channels: int, size: int, num_classes: int) -> nn.Module:
    if name == "mlp":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(channels * size * size, 64), nn.ReLU(),
            nn.Linear(64, 64), nn.ReLU(),
            nn.Linear(64, num_classes),
        )
    norm = {"cnn": None, "cnn_bn": "batch", "cnn_gn": "group"}[name]
    return _conv_net(channels, size, num_classes, norm)


def _conv_net(channels: int, size: int, num_classes: int, norm: str | None) -> nn.Sequential:
    """Two 3×3 conv blocks (optionally normalised), pooled to 4×4, then one linear layer."""
    layers: list[nn.Module] = []
    for c_in, c_out in ((channels, 16), (16, 32)):
        layers.append(nn.Conv2d(c_in, c_out, 3, padding=1))
        if norm == "batch":
            layers.append(nn.BatchNorm2d(c_out))
        elif norm == "group":
            layers.append(nn.GroupNorm(4, c_out))
        layers.append(nn.ReLU())
        if c_in == channels and size >= 16:
            layers.append(nn.MaxPool2d(2))  # quarters the second conv's cost on larger images
    layers += [nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(32 * 16, num_classes)]
    return nn.Sequential(*layers)


def _build_torchvision(name: str, input_shape: tuple[int, int, int], size: int,
                       num_classes: int) -> nn.Module:
    import torchvision  # on use: importing it pulls in torch._dynamo, 2 s of every worker's start

    if name == "vit_b_16":
        if size % VIT_PATCH:
            raise ModelInputError(
                f"vit_b_16 needs square images whose size is a multiple of {VIT_PATCH} (its patch "
                f"size); it would see {size}×{size} from a {_dims(input_shape)} input: "
                f"set image_size to {VIT_PATCH}, {2 * VIT_PATCH}, …, 224")
        return torchvision.models.get_model(name, weights=None, num_classes=num_classes, image_size=size)
    net = torchvision.models.get_model(name, weights=None, num_classes=num_classes)
    _probe(name, net, size)
    return net


def _probe(name: str, net: nn.Module, size: int) -> None:
    """Run one tiny eval forward so a size the network cannot take fails here, clearly."""
    net.eval()
    try:
        with torch.no_grad():
            net(torch.zeros(2, 3, size, size))
    except (RuntimeError, ValueError) as exc:
        raise ModelInputError(f"{name} cannot take 3×{size}×{size} images ({first_line(exc)}): "
                              f"set a larger image_size, e.g. 32 or 224") from exc
    finally:
        net.train()

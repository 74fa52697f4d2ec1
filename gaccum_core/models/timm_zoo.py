"""`timm:NAME`: any timm image model, untrained or from your weights file (pretrained), with the data set's
channels, classes and image size.

timm is imported when such a model is built (it takes a second). Fixed-size families (ViT and the
like) are built for the run's image size; the others take any size as they are.
"""

from __future__ import annotations

import difflib

from torch import nn

from gaccum_core.config import TIMM_PREFIX, ConfigError
from gaccum_core.models.pretrained import load_timm


def build_timm(model: str, channels: int, size: int, num_classes: int,
               weights_file: str = "") -> tuple[nn.Module, str]:
    """timm.create_model(NAME, …) for model 'timm:NAME', untrained or from weights_file, and the classifier reset
    said ('' when none); ConfigError naming close matches when timm has no such model, or what does not fit."""
    import timm

    name = model.removeprefix(TIMM_PREFIX)
    if not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=4, cutoff=0.6)
        hint = f"did you mean {', '.join(TIMM_PREFIX + c for c in close)}?" if close else "see timm.list_models()"
        raise ConfigError("model", model, f"a timm model name: timm has no {name!r} ({hint})")

    def create(**weights: object) -> nn.Module:
        common = dict(num_classes=num_classes, in_chans=channels, **weights)
        try:
            return timm.create_model(name, img_size=size, **common)
        except TypeError as exc:
            if "img_size" not in str(exc):
                raise
            return timm.create_model(name, **common)  # a family that takes any image size

    if not weights_file:
        return create(pretrained=False), ""
    return load_timm(create, name, model, weights_file, channels, num_classes)

"""`timm:NAME`: any timm image model, untrained, with the data set's channels, classes and image size.

timm is imported when such a model is built (it takes a second). Fixed-size families (ViT and the
like) are built for the run's image size; the others take any size as they are.
"""

from __future__ import annotations

import difflib

from torch import nn

from gaccum_core.config import TIMM_PREFIX, ConfigError


def build_timm(model: str, channels: int, size: int, num_classes: int) -> nn.Module:
    """timm.create_model(NAME, pretrained=False, …) for model 'timm:NAME'; ConfigError naming close matches
    when timm has no such model."""
    import timm

    name = model.removeprefix(TIMM_PREFIX)
    if not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=4, cutoff=0.6)
        hint = f"did you mean {', '.join(TIMM_PREFIX + c for c in close)}?" if close else "see timm.list_models()"
        raise ConfigError("model", model, f"a timm model name: timm has no {name!r} ({hint})")
    common = dict(pretrained=False, num_classes=num_classes, in_chans=channels)
    try:
        return timm.create_model(name, img_size=size, **common)
    except TypeError as exc:
        if "img_size" not in str(exc):
            raise
        return timm.create_model(name, **common)  # a family that takes any image size

"""`MODULE:FUNCTION` or `path/to/file.py:FUNCTION`: your own image classifier.

gaccum calls FUNCTION(input_shape=(C, H, W), num_classes=N) under the run's seed and trains what it
returns, an nn.Module mapping a (B, C, H, W) float batch to (B, N) logits (imported by usercode).
"""

from __future__ import annotations

from torch import nn

from gaccum_core.config import ConfigError
from gaccum_core.usercode import call_user_function


def build_factory_model(model: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """Your FUNCTION's module for model 'MODULE:FUNCTION'; ConfigError naming what went wrong."""
    shape = tuple(input_shape)
    net = call_user_function("model", model, f"a factory that builds a model for input_shape={shape}, "
                             f"num_classes={num_classes}", input_shape=shape, num_classes=num_classes)
    if not isinstance(net, nn.Module):
        raise ConfigError("model", model, f"a factory returning an nn.Module: it returned a {type(net).__name__}")
    return net

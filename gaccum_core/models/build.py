"""Any model by name, its initial weights drawn from the run's seed or loaded from its weights file, with its
dropout off when asked."""

from __future__ import annotations

from torch import nn

from gaccum_core.config import RunConfig, is_hf
from gaccum_core.models.gpt import build_gpt
from gaccum_core.models.hf import build_hf  # imports transformers only when it builds one
from gaccum_core.models.vision import build_model
from gaccum_core.seeding import seeded


def build_seeded_model(config: RunConfig, input_shape: tuple[int, ...], num_classes: int,
                       from_weights_file: bool = True) -> nn.Module:
    """config.model with its initial weights drawn from config.seed (then config.weights_file's loaded over
    them, unless from_weights_file is False: a resumed run's come from its checkpoint), the process's global RNG
    left alone. num_classes: the classes of an image set, or the tokenizer's vocabulary of a text set."""
    def build() -> nn.Module:
        if config.model == "gpt":
            return build_gpt(config.gpt_preset)
        if is_hf(config.model):
            return build_hf(config, num_classes)
        weights_file = config.weights_file if from_weights_file else ""
        return build_model(config.model, input_shape, num_classes, config.image_size, weights_file)

    model = seeded(config.seed, build)
    if config.no_dropout:
        dropout_off(model)
    return model


def _is_dropout(module: nn.Module) -> bool:
    """nn.Dropout and its kin, torchvision's StochasticDepth (p) and timm's DropPath (drop_prob)."""
    return isinstance(module, nn.modules.dropout._DropoutNd) or type(module).__name__ in ("StochasticDepth", "DropPath")


def _probability(module: nn.Module) -> float:
    return float(getattr(module, "p", getattr(module, "drop_prob", 0.0)) or 0.0)


def active_dropout(model: nn.Module) -> list[str]:
    """The names of the model's dropout layers that drop something (p > 0)."""
    return [name for name, m in model.named_modules() if _is_dropout(m) and _probability(m) > 0]


def dropout_off(model: nn.Module) -> None:
    """Every dropout layer's probability set to 0: each then passes its input through, in train mode too."""
    for _, module in model.named_modules():
        if _is_dropout(module):
            setattr(module, "p" if hasattr(module, "p") else "drop_prob", 0.0)

"""weights_file: a timm or torchvision model started from your weights, a state dict on disk, checked to fit.

Read from a .safetensors file (safetensors) or a .pth, .pt or .bin one (torch.load with weights_only=True:
tensors and plain containers, never arbitrary objects); a checkpoint holding it under state_dict_ema, model_ema,
state_dict or model, or saved from DDP (names prefixed module.), is taken as timm takes it. A timm model loads it
with timm's own machinery (create_model's pretrained_cfg_overlay file=…), which also adapts the first convolution
to the data set's channels; a torchvision model with load_state_dict. Either way a classifier for other classes
than the data set's is left as the run's seed drew it, and every other name and shape must fit: a refusal names
the first few that do not, in one line (ConfigError naming weights_file), before anything trains.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
import re
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from safetensors import SafetensorError
from torch import nn

from gaccum_core.config import ConfigError
from gaccum_core.words import first_line, plural

Shapes = dict[str, tuple[int, ...]]
_SHOWN = 3  # the names a refusal lists of each kind
_WRAPPERS = ("state_dict_ema", "model_ema", "state_dict", "model")  # timm's load_state_dict's order
_FILLED = "num_batches_tracked"  # BatchNorm's step count: torch fills it in when a file leaves it out


def read_state_dict(path: str) -> dict[str, torch.Tensor]:
    """The tensors of a weights file by name; ConfigError naming weights_file when it is missing or is not one."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError("weights_file", path, "the path of an existing file: " +
                          ("it is a directory" if file.is_dir() else "there is no such file"))
    try:
        if file.suffix.lower() == ".safetensors":
            from safetensors.torch import load_file

            loaded: Any = load_file(file, device="cpu")
        else:
            with warnings.catch_warnings(action="ignore"):  # torch's on a pickle's protocol: one line says it all
                loaded = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated, not safetensors, a pickle of objects weights_only refuses
        raise ConfigError("weights_file", path, "a file that opens as a state dict (as safetensors or torch.save "
                          f"write one): {unreadable(exc)}") from None
    if isinstance(loaded, dict):
        loaded = next((loaded[k] for k in _WRAPPERS if isinstance(loaded.get(k), dict)), loaded)
    if not isinstance(loaded, dict) or not loaded:
        raise ConfigError("weights_file", path, f"a state dict (names to tensors): it holds {_kind(loaded)}")
    odd = next((name for name, value in loaded.items() if not isinstance(value, torch.Tensor)), None)
    if odd is not None:
        raise ConfigError("weights_file", path, f"a state dict (names to tensors): its {odd!r} is {_kind(loaded[odd])}")
    return {str(name).removeprefix("module."): value for name, value in loaded.items()}


def unreadable(exc: Exception) -> str:
    """Why a weights file does not open, in gaccum's words: what it is not. Never torch's own advice, to load it
    again with its weights-only unpickler switched off, which would run whatever code the file's pickle holds."""
    if isinstance(exc, SafetensorError):
        return f"it is not a safetensors file ({first_line(exc)})"
    if not isinstance(exc, pickle.UnpicklingError):
        return first_line(exc)
    named = re.search(r"GLOBAL (\S+)", str(exc))  # torch's weights-only unpickler names the class it refused
    return (f"it holds Python objects ({named[1]}), not tensors only, and gaccum never unpickles objects" if named
            else "it is not a file torch.save wrote (damaged, or another format)")


def _kind(value: Any) -> str:
    name = type(value).__name__
    return "an empty dictionary" if value == {} else f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def shapes_of(state: dict[str, torch.Tensor]) -> Shapes:
    """Each tensor's shape, by name."""
    return {name: tuple(tensor.shape) for name, tensor in state.items()}


def misfit(file: Shapes, model: Shapes, shapes: bool = True) -> str:
    """'2 keys missing (a, b), 1 unexpected (c), 1 shape differs (d: file 64×3×7×7, model 64×1×7×7)': how a
    file's tensors fail to fit a model's ('' when they fit; a BatchNorm step count may be left out). shapes=False:
    names only."""
    missing = [name for name in model if name not in file and not name.endswith(_FILLED)]
    unexpected = [name for name in file if name not in model]
    differ = [f"{name}: file {_dims(file[name])}, model {_dims(model[name])}"
              for name in model if shapes and name in file and file[name] != model[name]]
    parts = [f"{plural(len(missing), 'key')} missing ({_first(missing)})" if missing else "",
             f"{len(unexpected)} unexpected ({_first(unexpected)})" if unexpected else "",
             f"{len(differ)} shape{'s differ' if len(differ) > 1 else ' differs'} ({_first(differ, '; ')})"
             if differ else ""]
    return ", ".join(part for part in parts if part)


def _first(items: list[str], between: str = ", ") -> str:
    return between.join(items[:_SHOWN]) + (f"{between}…" if len(items) > _SHOWN else "")


def _dims(shape: tuple[int, ...]) -> str:
    return "×".join(str(d) for d in shape) or "scalar"


def _refuse(path: str, model: str, words: str) -> ConfigError:
    return ConfigError("weights_file", path, f"a state dict that fits {model}: {words}")


def _rows(state: Shapes, head: str | None) -> int:
    """The classes a file's classifier `head` scores (0 when the file has none)."""
    shape = state.get(f"{head}.weight") if head else None
    return shape[0] if shape else 0


def _without(shapes: Shapes, head: str | None) -> Shapes:
    return {name: shape for name, shape in shapes.items() if not head or name.rpartition(".")[0] != head}


def reset_words(head: str | None, rows: int, num_classes: int) -> str:
    """', fc reset to 10 classes (the file's scores 1000)' when the file's classifier scores other classes than the
    data set's, or the file has none; '' when it is loaded."""
    if not head or rows == num_classes:
        return ""
    return f", {head} reset to {num_classes} classes ({f'the file scores {rows}' if rows else 'the file has none'})"


def load_torchvision(net: nn.Module, path: str, model: str, num_classes: int) -> str:
    """Load a torchvision model's weights from path (its classifier kept as drawn when the file's scores other
    classes); ConfigError naming the first names and shapes that do not fit. Returns the reset said, or ''."""
    state = read_state_dict(path)
    file, expected = shapes_of(state), shapes_of(net.state_dict())
    head = _classifier(net, num_classes)
    rows = _rows(file, head)
    if rows != num_classes:  # the data set's classes: the seed's classifier stays
        file, expected = _without(file, head), _without(expected, head)
    words = misfit(file, expected)
    if words:
        raise _refuse(path, model, words)
    net.load_state_dict({name: state[name] for name in file}, strict=False)
    return reset_words(head, rows, num_classes)


def _classifier(net: nn.Module, num_classes: int) -> str | None:
    """The name of the last Linear layer scoring num_classes (fc, classifier.3, heads.head), or None."""
    heads = [name for name, m in net.named_modules() if isinstance(m, nn.Linear) and m.out_features == num_classes]
    return heads[-1] if heads else None


def load_timm(create: Callable[..., nn.Module], name: str, model: str, path: str, channels: int,
              num_classes: int) -> tuple[nn.Module, str]:
    """create(pretrained=…, pretrained_cfg_overlay=…) with timm loading path's weights, and the reset said;
    ConfigError naming the first names and shapes that do not fit."""
    from timm.models import get_pretrained_cfg

    file = shapes_of(read_state_dict(path))
    cfg = get_pretrained_cfg(name)
    if cfg is None:
        raise ConfigError("weights_file", path, f"a timm model with a pretrained config to load it by: timm has none for {name}")
    heads = (cfg.classifier,) if isinstance(cfg.classifier, str) else tuple(cfg.classifier or ())
    head, conv = (heads[0] if heads else None), f"{cfg.first_conv}.weight" if cfg.first_conv else None
    rows = _rows(file, head)
    # The file's own classes and channels: timm then resets a classifier of others, and adapts a first
    # convolution made for other channels (3 by timm's default) to the data set's.
    same_channels = conv in file and len(file[conv]) == 4 and file[conv][1] == channels
    source = (channels if same_channels else cfg.input_size[0], *cfg.input_size[1:])
    try:
        with _timm_quiet():
            net = create(pretrained=True, pretrained_cfg_overlay=dict(file=path, num_classes=rows, input_size=source))
    except ConfigError:
        raise
    except Exception as exc:  # load_state_dict's refusal, or timm's own (a first convolution it cannot adapt)
        with torch.device("meta"):  # the model's shapes, no memory, no draw from the seed
            expected = shapes_of(create(pretrained=False).state_dict())
        raise _refuse(path, model, _timm_misfit(file, expected, head, conv, rows, num_classes)
                      or f"timm refuses it ({first_line(exc)})") from None
    if rows != num_classes:  # timm then loads the rest leniently: every other name must still be there (its
        # shapes timm has checked, after what a model's own filter reshapes, e.g. a ViT's position embeddings)
        words = misfit(_without(file, head), _without(shapes_of(net.state_dict()), head), shapes=False)
        if words:
            raise _refuse(path, model, words)
    return net, reset_words(head, rows, num_classes)


@contextmanager
def _timm_quiet() -> Iterator[None]:
    """timm's warnings while it loads (unexpected keys, a first convolution adapted) kept off stderr, where a run's
    worker reports and the command line says one line: what does not fit is refused here in gaccum's words."""
    logger = logging.getLogger("timm")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _timm_misfit(file: Shapes, expected: Shapes, head: str | None, conv: str | None, rows: int,
                 num_classes: int) -> str:
    """misfit, but for what timm adapts: a classifier of other classes, a first convolution of other channels."""
    if rows != num_classes:
        file, expected = _without(file, head), _without(expected, head)
    if conv in file and conv in expected and _but_channels(file[conv]) == _but_channels(expected[conv]):
        file = {**file, conv: expected[conv]}
    return misfit(file, expected)


def _but_channels(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[:1] + shape[2:]


def weights_origin(path: str, reset: str) -> str:
    """'weights loaded from w.safetensors (sha256 1a2b3c4d5e6f), fc reset to 10 classes': what a run started from."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return f"weights loaded from {Path(path).name} (sha256 {digest.hexdigest()[:12]}){reset}"

"""The weights of an `hf:DIR`, checked before a run from their headers: every file from_pretrained would
open opens, and the tensors it holds fit the model config.json describes.

Read, never the tensors' data: a safetensors header (and that its data ends where the file does),
an index's JSON and each shard it names, a pytorch_model.bin's zip directory and its table of tensors
(torch's weights-only unpickler onto the meta device). Compared with the model built on the meta device,
with from_pretrained's tolerances: a base-model prefix present or absent, transformers' own renamings of
a model's checkpoint names, tied weights stored once, buffers, tensors the model has no place for.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from gaccum_core.config import ConfigError
from gaccum_core.words import first_line
from gaccum_core.hfdir import hf_directory
from gaccum_core.models.pretrained import unreadable

# In the order from_pretrained prefers them: safetensors first (no pickle), a sharded index, then PyTorch's.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
# What torch.save wrote before its zip format (PyTorch < 1.6): a pickled magic number first.
_LEGACY_START = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19."
_MAX_HEADER = 100_000_000  # safetensors' own limit on a header's length

Shapes = dict[str, tuple[tuple[int, ...], str]]  # a tensor's name: its shape, the file holding it


def weights_file(model: str) -> Path | None:
    """The weights file in DIR that from_pretrained would load, or None (initialised from config.json)."""
    path = hf_directory(model)
    return next((path / name for name in WEIGHT_FILES if (path / name).is_file()), None)


def check_weights(model: str, hf_config: Any) -> None:
    """ConfigError naming model when its weights would not load: a file that does not open, a shard that is
    missing, a tensor of another shape than the model's, a parameter the files lack."""
    found = weights_file(model)
    if found is None:
        return
    sharded = found.name.endswith(".index.json")
    shapes = _index_shapes(model, found) if sharded else _file_shapes(model, found, found.name)
    if shapes is not None and getattr(hf_config, "quantization_config", None) is None:  # quantised: other names
        _check_fit(model, f"the shards {found.name} names" if sharded else found.name, shapes, hf_config)


def _refuse(model: str, what: str) -> ConfigError:
    return ConfigError("model", model, f"a directory whose weights fit its config.json: {what}")


class _Damaged(Exception):
    """A weights file that is not what its name says, in words for the user."""


def _index_shapes(model: str, index: Path) -> Shapes | None:
    """The shapes in the shards an index names (from_pretrained reads every shard's own names)."""
    try:
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _refuse(model, f"{index.name} is not JSON ({first_line(exc)})") from None
    except (KeyError, TypeError, AttributeError):
        raise _refuse(model, f"{index.name} has no weight_map of tensor names to shard files") from None
    shapes: Shapes = {}
    for name in shards:
        shard = index.parent / str(name)
        if not shard.is_file():
            raise _refuse(model, f"{index.name} names the shard {name}, which is not in the directory")
        found = _file_shapes(model, shard, f"{name} (a shard {index.name} names)")
        if found is None:
            return None
        shapes.update(found)
    return shapes


def _file_shapes(model: str, path: Path, label: str) -> Shapes | None:
    """Each tensor's shape in one weights file, from its header; None for a pre-1.6 PyTorch file."""
    try:
        shapes = _header_shapes(path)
    except _Damaged as exc:
        raise _refuse(model, f"{label} does not open: {exc}") from None
    except Exception as exc:  # SafetensorError (truncated, a header that is not JSON), torch's zip or unpickler
        raise _refuse(model, f"{label} does not open: {unreadable(exc)}") from None
    return None if shapes is None else {name: (shape, path.name) for name, shape in shapes.items()}


def _header_shapes(path: Path) -> dict[str, tuple[int, ...]] | None:
    if path.suffix == ".safetensors":
        return _safetensors_shapes(path)
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as file:
            if file.read(len(_LEGACY_START)) == _LEGACY_START:
                return None  # its table of tensors is not read apart from their data: from_pretrained reads it
        raise _Damaged("it has no zip directory (truncated, or not written by torch.save)")
    table = torch.load(path, map_location="meta", weights_only=True, mmap=True)  # meta: no tensor data read
    if not isinstance(table, dict):
        raise _Damaged(f"it holds a {type(table).__name__}, not a dictionary of tensors")
    return {name: tuple(t.shape) for name, t in table.items() if isinstance(t, torch.Tensor)}


def _safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """The names and shapes in a safetensors header: its length in 8 bytes, then JSON, then the data, which
    must end where the file does. Read here, not by safe_open, which maps the file and reads ahead megabytes."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        length = int.from_bytes(file.read(8), "little")
        if not 2 <= length <= min(size - 8, _MAX_HEADER):
            raise _Damaged(f"its first 8 bytes give a header of {length} bytes, which its {size} bytes cannot "
                           "hold (truncated, or not safetensors)")
        header = json.loads(file.read(length))
    tensors = {name: entry for name, entry in header.items() if name != "__metadata__"}
    end = 8 + length + max((entry["data_offsets"][1] for entry in tensors.values()), default=0)
    if end != size:
        raise _Damaged(f"its header places data up to byte {end}, the file has {size} bytes (truncated?)")
    return {name: tuple(entry["shape"]) for name, entry in tensors.items()}


def _check_fit(model: str, files: str, shapes: Shapes, hf_config: Any) -> None:
    """Every tensor the model has a place for is of its shape, and every parameter it needs is in the files."""
    expected = _expected(model, hf_config)
    covered: set[str] = set()
    unplaced = []
    for name, (shape, where) in shapes.items():
        targets, converted = expected.targets(name)
        if not targets:
            unplaced.append(name)  # from_pretrained ignores it
        covered.update(targets)
        want = None if converted or not targets else expected.state[targets[0]].shape  # a conversion reshapes
        if want is not None and tuple(want) != shape:
            raise _refuse(model, f"{where} holds {name} of shape {_shape(shape)}, the model's is {_shape(want)}")
    lacking = [name for name in expected.needed if name not in covered]
    if lacking:
        more = f" (and {len(lacking) - 1} more of its {len(expected.needed)} weights)" if len(lacking) > 1 else ""
        holds = f", whose {unplaced[0]} has no place in the model" if unplaced else ""
        raise _refuse(model, f"the model's {lacking[0]}{more} is not in {files}{holds}")


def _shape(shape: Any) -> str:
    return "(" + ", ".join(str(int(d)) for d in shape) + ("," if len(shape) == 1 else "") + ")"


@dataclasses.dataclass
class _Expected:
    """The model's state dict on the meta device, with how from_pretrained maps a file's names onto it."""

    state: dict[str, torch.Tensor]
    needed: list[str]  # parameters a file must hold: not buffers, not tied to another, not ignored when missing
    prefix: str
    renamings: list  # transformers' WeightRenaming: a name changed
    converters: list  # transformers' WeightConverter: tensors merged or split, so reshaped

    def targets(self, name: str) -> tuple[list[str], bool]:
        """The model's names a file's tensor loads into (several when a conversion splits it), and whether a
        conversion (which may reshape) takes it there."""
        from transformers.core_model_loading import rename_source_key

        renamed, pattern = rename_source_key(name, self.renamings, self.converters, self.prefix, self.state)
        if renamed not in self.state and name in self.state:  # as from_pretrained: the name as it is
            renamed, pattern = rename_source_key(name, [], [], self.prefix, self.state)
        if renamed not in self.state:
            return [], False
        if pattern is None:
            return [renamed], False
        converter = next(c for c in self.converters if pattern in c.source_patterns)
        first = converter.target_patterns[0]
        return [renamed.replace(first, t) for t in converter.target_patterns], True


def _expected(model: str, hf_config: Any) -> _Expected:
    """The model config.json builds, on the meta device (no memory, no initialisation of real tensors)."""
    from transformers import AutoModelForCausalLM
    from transformers.core_model_loading import WeightConverter, WeightRenaming
    from transformers.modeling_utils import get_model_conversion_mapping

    try:
        with torch.device("meta"):
            built = AutoModelForCausalLM.from_config(copy.deepcopy(hf_config))
    except Exception as exc:  # a config transformers reads but cannot build from
        raise ConfigError("model", model, f"a config.json transformers builds a model from: "
                          f"{first_line(exc)}") from None
    state = built.state_dict()
    buffers = {name for name, _ in built.named_buffers()}
    tied = getattr(built, "all_tied_weights_keys", None) or {}  # {lm_head.weight: model.embed_tokens.weight}
    ignored = [re.compile(p) for p in built._keys_to_ignore_on_load_missing or ()]
    needed = [n for n in state if n not in buffers and n not in tied and not any(p.search(n) for p in ignored)]
    # transformers 5's own mapping of checkpoint names (LayerNorm.gamma, a MoE's experts merged, …), as
    # from_pretrained applies it: internal to transformers, whose version requirements.txt pins
    conversions = get_model_conversion_mapping(built, None, None)
    return _Expected(state, needed, built.base_model_prefix, [c for c in conversions if isinstance(c, WeightRenaming)],
                     [c for c in conversions if isinstance(c, WeightConverter)])

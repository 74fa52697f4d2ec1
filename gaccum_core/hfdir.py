"""An hf:DIR setting, shared by the tokenizer (data) and the model (models): its directory, and the id that
pads its batches.

Padding is -1, which no vocabulary holds: the model wrapper makes it the attention mask, so padding
needs no token of its own and no real token is ever mistaken for padding.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gaccum_core.config import HF_PREFIX, ConfigError

MASKED = -1  # an hf: model's padding id in a batch


def hf_directory(model: str) -> Path:
    """The directory of model 'hf:DIR', which must exist: ConfigError naming the model field otherwise."""
    path = Path(model.removeprefix(HF_PREFIX)).expanduser()
    if not path.is_dir():
        what = "a file, not a directory" if path.exists() else "no such directory"
        raise ConfigError("model", model, f"hf:DIR with a saved model's directory: {path} is {what}")
    _refuse_custom_code(model, path)
    return path.resolve()


# The files in which transformers finds `auto_map`: classes from the directory's own .py files, which it
# would import (trust_remote_code) or ask about at a prompt. gaccum never runs them.
_AUTO_MAP_FILES = ("config.json", "tokenizer_config.json", "preprocessor_config.json", "processor_config.json")


def _refuse_custom_code(model: str, path: Path) -> None:
    """ConfigError naming model when the directory declares custom code (auto_map), read from its JSON only."""
    for name in _AUTO_MAP_FILES:
        try:
            with open(path / name, "rb") as file:
                declared = json.loads(file.read(1 << 22))  # a real config is kilobytes
        except (OSError, ValueError):
            continue  # missing or unreadable: the model's loader names that file
        if isinstance(declared, dict) and declared.get("auto_map"):
            raise ConfigError("model", model, f"a model transformers builds from its own classes: {path / name} "
                              "has auto_map (code in the directory), which gaccum never runs (trust_remote_code "
                              "stays off)")


def directory_version(path: Path) -> tuple:
    """The directory's files and their modification times: a cache key that changes when they do."""
    return tuple(sorted((e.name, e.stat().st_mtime_ns) for e in os.scandir(path) if e.is_file()))

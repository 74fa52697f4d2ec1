"""An hf:DIR setting, shared by the tokenizer (data) and the model (models): its directory, and the id that
pads its batches.

Padding is -1, which no vocabulary holds: the model wrapper makes it the attention mask, so padding
needs no token of its own and no real token is ever mistaken for padding.
"""

from __future__ import annotations

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
    return path.resolve()


def directory_version(path: Path) -> tuple:
    """The directory's files and their modification times: a cache key that changes when they do."""
    return tuple(sorted((e.name, e.stat().st_mtime_ns) for e in os.scandir(path) if e.is_file()))

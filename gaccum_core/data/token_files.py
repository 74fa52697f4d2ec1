"""`tokens`: nanoGPT's layout, token ids already written to disk and memory-mapped, never read whole.

data_dir/train.bin holds the training ids as one flat array of token_dtype (uint16 as nanoGPT writes it, or
uint32), data_dir/val.bin the validation ids when present; without it the last tenth of train.bin's ids is
held out. No document boundaries: the stream is packed by nature, cut into full sequences of max_seq_len
targets (sequences.PackedSequences). Ids must fit the dtype and the model's vocabulary; the largest id of
each file is found once per file version, in chunks, and remembered.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data.sequences import PackedSequences
from gaccum_core.data.tokens import tokens_for

TRAIN, VALIDATION = "train.bin", "val.bin"
HELD_OUT = 10  # without val.bin, the last 1/HELD_OUT of train.bin's ids is the validation split
SCAN_IDS = 1 << 24  # ids read at once while looking for the largest: 32 MB of uint16
_MAX_IDS: dict[tuple[str, int, int], int] = {}  # (path, size, mtime_ns) → the file's largest id
_MAX_REMEMBERED = 64


def _dir(config: RunConfig) -> Path:
    """config.data_dir, which must be a folder holding train.bin."""
    root = Path(config.data_dir).expanduser()
    if not root.is_dir():
        there = "this is a file" if root.exists() else "there is no such folder"
        raise ConfigError("data_dir", config.data_dir, f"a folder holding {TRAIN} (and {VALIDATION}) of token "
                          f"ids, nanoGPT's layout: {there}")
    if not (root / TRAIN).exists():
        raise ConfigError("data_dir", config.data_dir, f"a folder holding {TRAIN} (and {VALIDATION}) of token "
                          f"ids, nanoGPT's layout: {root} has no {TRAIN}")
    return root


def _file_info(config: RunConfig, path: Path) -> os.stat_result:
    """The stat of a regular, non-empty file of whole token_dtype ids."""
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError("data_dir", config.data_dir, f"a folder whose {path.name} is a regular file of token "
                          "ids: this one is not (a FIFO, a device or a folder)")
    width = np.dtype(config.token_dtype).itemsize
    if info.st_size == 0:
        raise ConfigError("data_dir", config.data_dir, f"a {path.name} holding token ids: {path} is empty")
    if info.st_size % width:
        raise ConfigError("token_dtype", config.token_dtype, f"the dtype {path} was written with: its "
                          f"{info.st_size:,} bytes are not a whole number of {config.token_dtype} ids "
                          f"({width} bytes each)")
    return info


def _check_dtype(config: RunConfig, vocab_size: int) -> None:
    """ConfigError naming token_dtype when the model's vocabulary has ids the dtype cannot hold."""
    most = int(np.iinfo(config.token_dtype).max)
    if vocab_size > most + 1:
        raise ConfigError("token_dtype", config.token_dtype, f"a dtype that holds every id of the model's "
                          f"vocabulary: {config.token_dtype} holds ids up to {most:,}: the vocabulary has "
                          f"{vocab_size:,} ids; write and read uint32 (token_dtype, --token-dtype)")


def largest_id(path: Path, dtype: str, info: os.stat_result) -> int:
    """The largest id in the file, read SCAN_IDS at a time; remembered per (path, size, mtime_ns). Read, not
    memory-mapped: a map's pages, once touched, would count in the process's resident memory."""
    key = (str(path.resolve()), info.st_size, info.st_mtime_ns)
    if key not in _MAX_IDS:
        found = 0
        with open(path, "rb") as file:
            while len(chunk := np.fromfile(file, dtype=dtype, count=SCAN_IDS)):
                found = max(found, int(chunk.max()))
        if len(_MAX_IDS) >= _MAX_REMEMBERED:
            _MAX_IDS.clear()
        _MAX_IDS[key] = found
    return _MAX_IDS[key]


def _ids(config: RunConfig, path: Path, vocab_size: int, vocabulary: str) -> np.memmap:
    """The file's ids, memory-mapped, once each is known to be below vocab_size."""
    info = _file_info(config, path)
    found = largest_id(path, config.token_dtype, info)
    if found >= vocab_size:
        raise ConfigError("data_dir", config.data_dir, f"token ids below the model's vocabulary of {vocab_size:,} "
                          f"({vocabulary}): {path} holds id {found:,} (written with another tokenizer, or "
                          f"another dtype than token_dtype {config.token_dtype}?)")
    return np.memmap(path, dtype=config.token_dtype, mode="r")


def _split(config: RunConfig) -> tuple[np.ndarray, np.ndarray, bool]:
    """(train ids, validation ids, whether val.bin holds them) of config.data_dir, checked."""
    root = _dir(config)
    tokens = tokens_for(config)  # ConfigError naming model for an hf: directory without a usable tokenizer
    _check_dtype(config, tokens.vocab_size)
    train = _ids(config, root / TRAIN, tokens.vocab_size, tokens.name)
    if (root / VALIDATION).exists():
        return train, _ids(config, root / VALIDATION, tokens.vocab_size, tokens.name), True
    held = len(train) // HELD_OUT
    return train[:len(train) - held], train[len(train) - held:], False


def _check_lengths(config: RunConfig, train: np.ndarray, validation: np.ndarray, from_file: bool) -> None:
    """ConfigError naming data_dir when a split holds not even one sequence of max_seq_len + 1 ids."""
    size = config.max_seq_len + 1
    where = VALIDATION if from_file else f"the last tenth of {TRAIN} (there is no {VALIDATION})"
    for name, ids in ((TRAIN, train), (where, validation)):
        if len(ids) < size:
            raise ConfigError("data_dir", config.data_dir, f"token files holding at least one sequence of "
                              f"max_seq_len + 1 = {size:,} ids per split: {name} holds {len(ids):,} (lower "
                              "max_seq_len, --max-seq-len, or write more ids)")


def _sources(config: RunConfig) -> tuple[PackedSequences, PackedSequences, bool]:
    train, validation, from_file = _split(config)
    _check_lengths(config, train, validation, from_file)
    pad = tokens_for(config).pad
    return (PackedSequences(train, config.max_seq_len, pad), PackedSequences(validation, config.max_seq_len, pad),
            from_file)


def tokens_sources(config: RunConfig) -> tuple[PackedSequences, PackedSequences]:
    """(train, validation) packed sequences of config.data_dir's train.bin and val.bin (or its last tenth)."""
    train, validation, _ = _sources(config)
    return train, validation


def describe_tokens(config: RunConfig) -> str:
    """One line: ids and sequences of each split, where validation comes from, the dtype."""
    train, validation, from_file = _sources(config)
    held = VALIDATION if from_file else f"the last tenth of {TRAIN} held out, no {VALIDATION}"
    return (f"tokens: {len(train.ids):,} train / {len(validation.ids):,} validation {config.token_dtype} ids "
            f"({held}), {len(train):,} / {len(validation):,} packed sequences of {config.max_seq_len} tokens, "
            f"{tokens_for(config).name}")


def files_identity(config: RunConfig) -> str:
    """Which token files these are: each of train.bin and val.bin's resolved path, size and modification time."""
    parts = []
    for name in (TRAIN, VALIDATION):
        path = _dir(config) / name
        if path.exists():
            info = path.stat()
            parts.append(f"{path.resolve()} ({info.st_size} bytes, modified {info.st_mtime_ns})")
    return "; ".join(parts)

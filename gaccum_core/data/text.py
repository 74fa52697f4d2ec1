"""Text as token sequences of different lengths, offline: bytes for gpt, the model's tokenizer for hf:DIR.

`pydoc`: the Python documentation topics every Python ships (`pydoc_data.topics`, 79 documents);
`text`: any UTF-8 file, split on blank lines into documents, or a .jsonl file, one document a line
(its text_field). Each document's tokens (see tokens.py) are cut into chunks of at most
max_seq_len + 1 (a chunk of L tokens gives L - 1 next-token targets), so a document's last chunk is
shorter: micro-batches hold different numbers of target tokens, which is where a mean of
per-micro-batch means goes wrong. Every tenth document (by sorted title for pydoc, by position for a
file) is held out for validation: a fixed split.
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat

import torch

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data.tokens import BYTE_PAD, ByteTokens, ModelTokens, tokens_for

PAD = BYTE_PAD   # input id of gpt's padding
IGNORE = -100    # cross_entropy's ignore_index: padding has no target
VALIDATION_EVERY = 10
Tokens = ByteTokens | ModelTokens


class TokenSequences:
    """Token sequences addressed by index; batch() pads to the micro-batch's longest with `pad`."""

    def __init__(self, chunks: list[list[int]], pad: int = PAD) -> None:
        self.chunks = [torch.tensor(c, dtype=torch.long) for c in chunks]
        self.targets = torch.tensor([len(c) - 1 for c in chunks], dtype=torch.long)  # per sequence
        self.pad = pad

    def __len__(self) -> int:
        return len(self.chunks)

    def target_tokens(self, indices: torch.Tensor) -> int:
        """Next-token targets the sequences at these indices hold."""
        return int(self.targets[indices].sum())

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (N, T) padded with self.pad and targets (N, T) with IGNORE where padded; T = longest - 1."""
        rows = [self.chunks[int(i)] for i in indices]
        width = max((len(r) for r in rows), default=2) - 1  # no rows: a data-parallel rank's empty share
        inputs = torch.full((len(rows), width), self.pad, dtype=torch.long)
        targets = torch.full((len(rows), width), IGNORE, dtype=torch.long)
        for n, row in enumerate(rows):
            inputs[n, :len(row) - 1] = row[:-1]
            targets[n, :len(row) - 1] = row[1:]
        return inputs, targets


def chunked(documents: list[list[int]], max_seq_len: int) -> list[list[int]]:
    """Each document's tokens cut into pieces of max_seq_len + 1 (its last piece shorter); pieces of
    fewer than 2 tokens, which hold no target, are dropped."""
    size = max_seq_len + 1
    pieces = [doc[i:i + size] for doc in documents for i in range(0, len(doc), size)]
    return [p for p in pieces if len(p) >= 2]


def pydoc_documents() -> list[str]:
    """The pydoc topics, sorted by title."""
    from pydoc_data.topics import topics

    return [topics[title] for title in sorted(topics)]


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
# The kernel's own files look regular (of size 0) but are made as they are read, or fail (/proc/self/mem).
# /dev needs no entry: its devices are refused by kind, and /dev/shm holds real files.
_KERNEL_ROOTS = ("/proc", "/sys")


def _refuse_kernel_file(path: str) -> None:
    """ConfigError naming text_file for a path that is, or leads to, a file under /proc or /sys."""
    try:
        real = os.path.realpath(path)
    except ValueError:  # a NUL byte, which no path holds
        raise ConfigError("text_file", path, "a path without NUL bytes") from None
    root = next((r for r in _KERNEL_ROOTS if real == r or real.startswith(r + "/")), None)
    if root is not None:
        raise ConfigError("text_file", path, f"a file of text on disk: {real} is under {root}, the kernel's own "
                          "files, never training text")


def _read_regular_file(path: str, max_mb: int) -> bytes:
    """The bytes of a regular file of at most max_mb MB, checked on the open file before reading: a FIFO
    would block for ever and /dev/zero never end (the Train page reads it in the server's process)."""
    _refuse_kernel_file(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO's open does not block
    except FileNotFoundError:
        raise ConfigError("text_file", path, "an existing file: there is no such file") from None
    except PermissionError:
        raise ConfigError("text_file", path, "a readable file: permission denied") from None
    except OSError as exc:
        raise ConfigError("text_file", path, f"a readable file: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ConfigError("text_file", path, "a file: this is a directory")
        kind = next((words for test, words in _KINDS if test(info.st_mode)), "not a regular file")
        raise ConfigError("text_file", path, f"a regular file: this is {kind}")
    with os.fdopen(fd, "rb") as file:
        limit = max_mb * 1024 * 1024
        if info.st_size > limit:
            raise ConfigError("text_file", path, f"a file of at most {max_mb} MB: this one has "
                              f"{info.st_size / 2**20:.1f} MB (raise text_file_max_mb, --text-file-max-mb, to read it)")
        try:
            return file.read(limit)
        except OSError as exc:  # a failing disk, a network file system gone
            raise ConfigError("text_file", path, f"a readable file: it cannot be read ({exc.strerror})") from None


def file_documents(path: str, max_mb: int = 256, field: str = "text") -> list[str]:
    """The documents of a UTF-8 file: its paragraphs (split on blank lines), or a .jsonl file's lines'
    `field`; ConfigError naming text_file (or text_field) when unusable."""
    try:
        text = _read_regular_file(path, max_mb).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("text_file", path, f"UTF-8 text: byte {exc.start} is not UTF-8") from None
    if path.lower().endswith(".jsonl"):
        documents = [d.strip() for d in _jsonl_documents(path, text, field) if len(d.strip()) >= 2]
        unit = "lines with text"
    else:
        documents = [p.strip() for p in re.split(r"\n\s*\n", text) if len(p.strip()) >= 2]
        unit = "paragraphs separated by a blank line"
    if len(documents) < 2:
        raise ConfigError("text_file", path, f"a file with at least 2 {unit}, one for training and one for "
                          f"validation: it has {len(documents)}")
    return documents


def _jsonl_documents(path: str, text: str, field: str) -> list[str]:
    """Each non-blank line's `field`: ConfigError naming the first line that is not a JSON object with it."""
    documents = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError("text_file", path, f"JSON Lines, one JSON object a line: line {number} is not "
                              f"JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(record, dict) or not isinstance(record.get(field), str):
            has = (f"its fields are {', '.join(map(repr, list(record)[:8]))}" if isinstance(record, dict)
                   else f"it is a JSON {type(record).__name__}")
            raise ConfigError("text_field", field, f"a text field of every line of {path}: line {number} has no "
                              f"string {field!r} ({has}; set text_field, --text-field, to the one holding the text)")
        documents.append(record[field])
    return documents


def split(documents: list[list[int]], max_seq_len: int, pad: int = PAD) -> tuple[TokenSequences, TokenSequences]:
    """(train, validation) sequences of tokenised documents: every VALIDATION_EVERY-th is held out (at least one)."""
    held = set(range(0, len(documents), VALIDATION_EVERY)) if len(documents) >= VALIDATION_EVERY else {0}
    train = [d for i, d in enumerate(documents) if i not in held]
    validation = [d for i, d in enumerate(documents) if i in held]
    return TokenSequences(chunked(train, max_seq_len), pad), TokenSequences(chunked(validation, max_seq_len), pad)


def text_sources(config: RunConfig) -> tuple[TokenSequences, TokenSequences]:
    """(train, validation) token sequences of pydoc (cached per tokenizer and length) or of config.text_file."""
    tokens = tokens_for(config)  # ConfigError naming model for an hf: directory without a usable tokenizer
    if config.dataset == "pydoc":
        return _pydoc(tokens, config.max_seq_len)
    documents = file_documents(config.text_file, config.text_file_max_mb, config.text_field)
    return split(tokens.encode_many(documents), config.max_seq_len, tokens.pad)


@functools.lru_cache(maxsize=4)
def _pydoc(tokens: Tokens, max_seq_len: int) -> tuple[TokenSequences, TokenSequences]:
    return split(tokens.encode_many(pydoc_documents()), max_seq_len, tokens.pad)


def describe_text(config: RunConfig) -> str:
    """One line: sequences and target tokens of each split."""
    train, test = text_sources(config)
    return (f"{config.dataset}: {len(train)} train / {len(test)} validation sequences of up to "
            f"{config.max_seq_len} tokens, {int(train.targets.sum()):,} / {int(test.targets.sum()):,} "
            f"target tokens, {tokens_for(config).name}")

"""Text as token sequences of different lengths, byte-level, offline.

`pydoc`: the Python documentation topics every Python ships (`pydoc_data.topics`, 79 documents);
`text`: any UTF-8 file, split on blank lines into documents. Each document is cut into chunks of at
most max_seq_len + 1 bytes (a chunk of L bytes gives L - 1 next-token targets), so a document's
last chunk is shorter: micro-batches hold different numbers of target tokens, which is where a mean
of per-micro-batch means goes wrong. Every tenth document (by sorted title for pydoc, by position for
a file) is held out for validation: a fixed split.
"""

from __future__ import annotations

import functools
import os
import re
import stat

import torch

from gaccum_core.config import ConfigError, RunConfig

PAD = 0          # input id of padding: byte 0 never occurs in text
IGNORE = -100    # cross_entropy's ignore_index: padding has no target
VALIDATION_EVERY = 10


class TokenSequences:
    """Byte sequences addressed by index; batch() pads to the micro-batch's longest."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = [torch.frombuffer(bytearray(c), dtype=torch.uint8).long() for c in chunks]
        self.targets = torch.tensor([len(c) - 1 for c in chunks], dtype=torch.long)  # per sequence

    def __len__(self) -> int:
        return len(self.chunks)

    def target_tokens(self, indices: torch.Tensor) -> int:
        """Next-token targets the sequences at these indices hold."""
        return int(self.targets[indices].sum())

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (N, T) padded with PAD and targets (N, T) with IGNORE where padded; T = longest - 1."""
        rows = [self.chunks[int(i)] for i in indices]
        width = max((len(r) for r in rows), default=2) - 1  # no rows: a data-parallel rank's empty share
        inputs = torch.full((len(rows), width), PAD, dtype=torch.long)
        targets = torch.full((len(rows), width), IGNORE, dtype=torch.long)
        for n, row in enumerate(rows):
            inputs[n, :len(row) - 1] = row[:-1]
            targets[n, :len(row) - 1] = row[1:]
        return inputs, targets


def chunked(documents: list[bytes], max_seq_len: int) -> list[bytes]:
    """Each document cut into pieces of max_seq_len + 1 bytes (its last piece shorter); pieces of
    fewer than 2 bytes, which hold no target, are dropped."""
    size = max_seq_len + 1
    pieces = [doc[i:i + size] for doc in documents for i in range(0, len(doc), size)]
    return [p for p in pieces if len(p) >= 2]


def pydoc_documents() -> list[bytes]:
    """The pydoc topics, sorted by title, as UTF-8 bytes."""
    from pydoc_data.topics import topics

    return [topics[title].encode("utf-8") for title in sorted(topics)]


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _read_regular_file(path: str, max_mb: int) -> bytes:
    """The bytes of a regular file of at most max_mb MB, checked on the open file before reading: a FIFO
    would block for ever and /dev/zero never end (the Train page reads it in the server's process)."""
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
        return file.read(limit)


def file_documents(path: str, max_mb: int = 256) -> list[bytes]:
    """A UTF-8 file's paragraphs (split on blank lines); ConfigError naming text_file when unusable."""
    try:
        text = _read_regular_file(path, max_mb).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("text_file", path, f"UTF-8 text: byte {exc.start} is not UTF-8") from None
    documents = [p.strip().encode("utf-8") for p in re.split(r"\n\s*\n", text) if len(p.strip()) >= 2]
    if len(documents) < 2:
        raise ConfigError("text_file", path, "a file with at least 2 paragraphs separated by a blank line, one for "
                          f"training and one for validation: it has {len(documents)}")
    return documents


def split(documents: list[bytes], max_seq_len: int) -> tuple[TokenSequences, TokenSequences]:
    """(train, validation) sequences: every VALIDATION_EVERY-th document is held out (at least one)."""
    held = set(range(0, len(documents), VALIDATION_EVERY)) if len(documents) >= VALIDATION_EVERY else {0}
    train = [d for i, d in enumerate(documents) if i not in held]
    validation = [d for i, d in enumerate(documents) if i in held]
    return TokenSequences(chunked(train, max_seq_len)), TokenSequences(chunked(validation, max_seq_len))


def text_sources(config: RunConfig) -> tuple[TokenSequences, TokenSequences]:
    """(train, validation) token sequences of pydoc (cached per length) or of config.text_file."""
    if config.dataset == "pydoc":
        return _pydoc(config.max_seq_len)
    return split(file_documents(config.text_file, config.text_file_max_mb), config.max_seq_len)  # ConfigError naming text_file


@functools.lru_cache(maxsize=4)
def _pydoc(max_seq_len: int) -> tuple[TokenSequences, TokenSequences]:
    return split(pydoc_documents(), max_seq_len)


def describe_text(config: RunConfig) -> str:
    """One line: sequences and target tokens of each split."""
    train, test = text_sources(config)
    return (f"{config.dataset}: {len(train)} train / {len(test)} validation sequences of up to "
            f"{config.max_seq_len} tokens, {int(train.targets.sum()):,} / {int(test.targets.sum()):,} "
            "target tokens, bytes")

"""Documents into token ids: batches of text through the tokenizer's batched encode, appended to each split's
ids, document spans and per-document columns (to files for the token cache, to memory for a bundled corpus), with
progress and a stop. A record, (prompt, completion) or pg's (prompt, completion, advantage, group index), is one
document whose first ids are its prompt's and whose last is an end-of-text id (in its span: the completion ends
there); its prompt length, group and advantage are kept in COLUMNS beside the ids.

A split's ids are its documents one after another: bytes put byte 0 (their end-of-text id) after each document,
a model's tokenizer ends each with its EOS already; a document's span leaves an added byte 0 out, so padded
sequences are each document's own chunks and packing joins documents with an end-of-text token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from gaccum_core.data.tokens import ByteTokens, ModelTokens

SPLITS = ("train", "val")
BATCH_CHARS = 1 << 20  # text encoded in one batched call (about 1 MB)
BATCH_DOCUMENTS = 4096
TOKENISING = "tokenising "  # how a build's progress line begins (a run's message while it tokenises)
Tokens = ByteTokens | ModelTokens
StopCheck = Callable[[], bool]


class TokenisingStopped(Exception):
    """A build stopped when asked to (should_stop): nothing was cached."""


@dataclass(frozen=True)
class BuildProgress:
    """Where a build is: text read, its speed and the time left (None where the total is unknown)."""

    name: str
    bytes_done: int
    bytes_total: int | None
    tokens_per_s: float
    seconds: float
    waiting: bool = False  # for another process's build of the same corpus
    damaged: str = ""  # why the corpus is tokenised again: its token cache being 'damaged (…)', or of an older format

    @property
    def seconds_left(self) -> float | None:
        """At the speed so far."""
        if self.bytes_total is None or not self.bytes_done:
            return None
        return max(self.bytes_total - self.bytes_done, 0) * self.seconds / self.bytes_done

    def words(self) -> str:
        """'tokenising corpus.jsonl: 12 of 100 MB · 3.1 MB/s · 28 s left'."""
        if self.waiting:
            return f"{TOKENISING}{self.name}: waiting for another process that tokenises it"
        whole = self.bytes_total or self.bytes_done  # 40 kB, 0.4 MB, 12 MB
        scale, unit, digits = ((2**10, "kB", 0) if whole < 0.1 * 2**20 else
                               (2**20, "MB", 0 if whole >= 10 * 2**20 else 1))
        done = f"{self.bytes_done / scale:.{digits}f}"
        size = f"{done} of {self.bytes_total / scale:.{digits}f} {unit}" if self.bytes_total else f"{done} {unit}"
        again = f" again, its token cache being {self.damaged}" if self.damaged else ""
        parts = [f"{TOKENISING}{self.name}{again}: {size}"]
        if self.seconds > 0:
            parts += [f"{self.bytes_done / 2**20 / self.seconds:.1f} MB/s", f"{self.tokens_per_s:,.0f} tokens/s"]
        if self.seconds_left is not None:
            parts.append(f"{self.seconds_left:.0f} s left")
        return " · ".join(parts)


Progress = Callable[[BuildProgress], None]


def never() -> bool:
    """A stop check that never asks to stop."""
    return False


def ignore(progress: BuildProgress) -> None:
    """Progress nobody shows."""


def ids_dtype(vocab_size: int) -> np.dtype:
    """uint16 for a vocabulary of fewer than 65,536 ids, else uint32 (nanoGPT's uint16 overflows past 65,535)."""
    return np.dtype(np.uint16 if vocab_size < 1 << 16 else np.uint32)


# A value per document beside the ids, its dtype and a plain document's value: a record's prompt length in ids
# (sft, pg), its group's index in its split (pg: -1 for none) and its advantage (pg).
COLUMNS = {"prompts": (np.dtype(np.int64), 0), "groups": (np.dtype(np.int64), -1),
           "advantages": (np.dtype(np.float64), 0.0)}


class SplitWriter:
    """One split's ids, document spans and COLUMNS, appended a batch at a time to binary files."""

    def __init__(self, ids: BinaryIO, spans: BinaryIO, columns: dict[str, BinaryIO], dtype: np.dtype) -> None:
        self.ids, self.spans, self.columns, self.dtype = ids, spans, columns, dtype
        self.tokens = self.documents = 0

    def add(self, arrays: list[np.ndarray], separator: int | None, columns: dict[str, list] | None = None) -> None:
        """Each document's ids, then the separator (when not None), which its span leaves out; columns: each
        one's values where given (a record's), else a plain document's."""
        for name, (kind, plain) in COLUMNS.items():
            values = (columns or {}).get(name)
            self.columns[name].write(np.asarray([plain] * len(arrays) if values is None else values, kind).tobytes())
        lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        steps = lengths + (separator is not None)
        starts = self.tokens + np.cumsum(steps) - steps
        if separator is not None:
            end = np.array([separator], dtype=self.dtype)
            arrays = [part for ids in arrays for part in (ids, end)]
        self.ids.write(np.concatenate(arrays).astype(self.dtype, copy=False).tobytes())
        self.spans.write(np.stack([starts, starts + lengths], axis=1).tobytes())
        self.tokens += int(steps.sum())
        self.documents += len(lengths)


def _columns(records: list[tuple[tuple[np.ndarray, int], tuple]]) -> dict[str, list]:
    """The COLUMNS of ((ids, prompt length), (prompt, completion[, advantage, group index])) records."""
    found = {"prompts": [length for (_, length), _ in records]}
    if len(records[0][1]) > 2:
        found |= {"advantages": [r[2] for _, r in records], "groups": [r[3] for _, r in records]}
    return found


def tokenise(documents: Iterable[tuple[str, str]], tokens: Tokens, writers: dict[str, SplitWriter],
             bytes_read: Callable[[], int], progress: Callable[[int, float], None] = lambda chars, s: None,
             should_stop: StopCheck = never) -> None:
    """Every document through tokens.encode_arrays in batches of about BATCH_CHARS, into its split's writer;
    progress(text read, seconds) and should_stop asked after each batch."""
    separator = None if tokens.appends_eos else tokens.eos
    start, batch, chars = time.perf_counter(), [], 0

    def flush() -> None:
        if isinstance(batch[0][1], tuple):  # records: (prompt, completion[, advantage, group]), EOS in their ids
            pairs = tokens.encode_records([record[:2] for _, record in batch])
            for split in SPLITS:
                mine = [(pair, record) for (where, record), pair in zip(batch, pairs) if where == split]
                if mine:
                    writers[split].add([ids for (ids, _), _ in mine], None, _columns(mine))
            batch.clear()
            return
        arrays = tokens.encode_arrays([text for _, text in batch])
        for split in SPLITS:
            mine = [ids for (where, _), ids in zip(batch, arrays) if where == split]
            if mine:
                writers[split].add(mine, separator)
        batch.clear()

    for split, text in documents:
        if split not in writers:
            raise ValueError(f"a document's split must be one of {', '.join(SPLITS)}, not {split!r}")
        batch.append((split, text))
        chars += sum(len(part) for part in text if isinstance(part, str)) if isinstance(text, tuple) else len(text)
        if chars >= BATCH_CHARS or len(batch) >= BATCH_DOCUMENTS:
            flush()
            chars = 0
            if should_stop():
                raise TokenisingStopped("stopped while tokenising: nothing was cached")
            progress(bytes_read(), time.perf_counter() - start)
    if batch:
        flush()
        progress(bytes_read(), time.perf_counter() - start)

"""Text as token sequences read by index from flat arrays of token ids: bytes for gpt, the model's tokenizer for hf:DIR.

`pydoc`: the Python documentation topics every Python ships (`pydoc_data.topics`, 79 documents), tokenised in
memory; `text`: the documents of text_file (a file, folder or glob of .txt and .jsonl shards: corpus.py) and
`hf-dataset`: the rows of a saved data set (hf_datasets.py), each tokenised once into the token cache
(token_cache.py) and memory-mapped by every run after; `sft`: records of a prompt and a completion (records.py),
whose loss counts completion tokens only (record_sequences.py), and `pg`: those with an advantage and a group. Every tenth document (by sorted title for pydoc, by
position for a corpus) is held out for validation, unless a data set has its own validation split.

Packing off: each document's tokens are cut into sequences of max_seq_len + 1 (L tokens give L - 1 next-token
targets), so a document's last one is shorter: micro-batches hold different numbers of target tokens, which is
where a mean of per-micro-batch means goes wrong. Packing on: each split's documents, joined by an end-of-text
token, are cut into full sequences of max_seq_len targets, never across the split (sequences.py).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from pathlib import Path

from gaccum_core.config import RECORD_DATASETS, RunConfig
from gaccum_core.data import hf_datasets
from gaccum_core.data.corpus import VALIDATION_EVERY, Corpus
from gaccum_core.data.record_sequences import PackedRecords, PaddedRecords
from gaccum_core.data.records import SavedRows, record_source
from gaccum_core.data.sequences import IGNORE, PackedSequences, PaddedSequences
from gaccum_core.data.token_cache import (DocumentSource, TokenCache, cache_folder, default_cache_dir,
                                          estimate_seconds, open_cache, read_cache, tokenise_in_memory)
from gaccum_core.data.tokenising import Progress, StopCheck
from gaccum_core.data.tokens import BYTE_PAD, ByteTokens, ModelTokens, tokens_for

# IGNORE (cross_entropy's ignore_index: padding has no target) is imported from here by the loss and evaluation.
__all__ = ["IGNORE", "PAD", "Tokens", "Sequences", "CORPUS_DATASETS", "CacheStatus", "pydoc_documents", "corpus_source",
           "cache_root", "text_sources", "tokenise_corpus", "cache_status", "check_corpus", "describe_text"]

PAD = BYTE_PAD   # input id of gpt's padding
Tokens = ByteTokens | ModelTokens
Sequences = PaddedSequences | PackedSequences | PaddedRecords | PackedRecords
CORPUS_DATASETS = ("text", "hf-dataset", *RECORD_DATASETS)  # tokenised into the token cache


def pydoc_documents() -> list[str]:
    """The pydoc topics, sorted by title."""
    from pydoc_data.topics import topics

    return [topics[title] for title in sorted(topics)]


def corpus_source(config: RunConfig) -> DocumentSource:
    """The documents config's corpus holds (ConfigError naming text_file, or data_dir, when it names none)."""
    if config.dataset == "hf-dataset":
        return SavedRows(config)
    if config.dataset in RECORD_DATASETS:
        return record_source(config)
    return Corpus(config.text_file, config.text_field, config.text_file_max_mb)


def cache_root(config: RunConfig) -> Path:
    """Where config's token caches are kept: cache_dir, else token_cache.default_cache_dir()."""
    return Path(config.cache_dir).expanduser() if config.cache_dir else default_cache_dir()


def text_sources(config: RunConfig, progress: Progress | None = None,
                 should_stop: StopCheck | None = None) -> tuple[Sequences, Sequences]:
    """(train, validation) sequences of pydoc, or of config's corpus from its token cache (built first when there
    is none, with progress and should_stop: token_cache.open_cache)."""
    tokens = tokens_for(config)  # ConfigError naming model for an hf: directory without a usable tokenizer
    if config.dataset == "pydoc":
        cache = _pydoc(tokens)
    else:
        cache = open_cache(cache_root(config), corpus_source(config), tokens, progress, should_stop)
    return _sequences(cache, "train", config, tokens.pad), _sequences(cache, "val", config, tokens.pad)


def _sequences(cache: TokenCache, split: str, config: RunConfig, pad: int) -> Sequences:
    ids, spans = cache.splits[split]
    if config.dataset in RECORD_DATASETS:
        kind = PackedRecords if config.packing == "on" else PaddedRecords
        columns = cache.columns[split]
        pg = (columns["groups"], columns["advantages"]) if config.dataset == "pg" else ()
        return kind(ids, spans, columns["prompts"], config.max_seq_len, pad, *pg)
    if config.packing == "on":
        return PackedSequences(ids, config.max_seq_len, pad)
    return PaddedSequences(ids, spans[:, 0], spans[:, 1], config.max_seq_len, pad)


@functools.lru_cache(maxsize=4)
def _pydoc(tokens: Tokens) -> TokenCache:
    split = (("val" if i % VALIDATION_EVERY == 0 else "train", text) for i, text in enumerate(pydoc_documents()))
    return tokenise_in_memory(split, tokens)


def tokenise_corpus(config: RunConfig, progress: Progress | None = None, should_stop: StopCheck | None = None) -> None:
    """Build config's token cache now unless it is there (a run does, before its first step, showing progress);
    nothing for a data set that needs none. tokenising.TokenisingStopped when should_stop asks."""
    if config.dataset in CORPUS_DATASETS:
        open_cache(cache_root(config), corpus_source(config), tokens_for(config), progress, should_stop)


@dataclass(frozen=True)
class CacheStatus:
    """Whether a corpus is tokenised yet; its size, and the seconds its tokenisation should take."""

    cached: bool
    megabytes: float
    seconds: float | None  # at the last speed measured for its tokenizer; None when none was

    def words(self) -> str:
        """'12.3 MB to tokenise on Start (about 4 s at the last measured speed)', or that it is cached."""
        size = f"{self.megabytes:.1f} MB" if self.megabytes >= 0.1 else f"{self.megabytes * 1024:.0f} kB"
        if self.cached:
            return f"{size}, tokenised"
        about = (f"about {max(self.seconds, 1):.0f} s at the last measured speed" if self.seconds is not None
                 else "no speed measured here yet")
        return f"{size} to tokenise on Start ({about})"


def corpus_name(config: RunConfig) -> str:
    """The name of config's corpus in the token cache, '<name>-<key>' (cheap: the files' identity, no reading): a
    corpus edited, added to or replaced gets another."""
    source = corpus_source(config)
    return cache_folder(cache_root(config), source.name, source.identity(), tokens_for(config)).name


def cache_status(config: RunConfig) -> CacheStatus:
    """Whether config's corpus is in its token cache (cheap: the files' identity, no reading); pydoc: always."""
    if config.dataset not in CORPUS_DATASETS:
        return CacheStatus(True, 0.0, 0.0)
    source, tokens, root = corpus_source(config), tokens_for(config), cache_root(config)
    cached = read_cache(cache_folder(root, source.name, source.identity(), tokens)) is not None
    total = source.total_bytes or 0
    return CacheStatus(cached, total / 2**20, 0.0 if cached else estimate_seconds(root, tokens, total))


def check_corpus(config: RunConfig) -> None:
    """What can be checked of config's corpus without tokenising it: its files, its first two documents (read
    and tokenised) and the tokenizer; ConfigError naming the field otherwise."""
    tokens = tokens_for(config)
    if config.dataset in CORPUS_DATASETS:
        first = [text for _, text in itertools.islice(corpus_source(config).documents(), 2)]
        if config.dataset in RECORD_DATASETS:
            tokens.encode_records([record[:2] for record in first])
        else:
            tokens.encode_arrays(first)


def describe_text(config: RunConfig) -> str:
    """One line: sequences and target tokens of each split; for a corpus not yet tokenised, its size and the time
    its tokenisation should take (it is never tokenised here)."""
    tokens = tokens_for(config)
    status = cache_status(config)
    if not status.cached:
        rows = f"{hf_datasets.describe_hf_dataset(config)}; " if config.dataset == "hf-dataset" else ""
        return f"{rows or config.dataset + ': '}{status.words()}, {tokens.name}"
    train, test = text_sources(config)
    length = config.max_seq_len
    shape = f"of {length} tokens, packed" if config.packing == "on" else f"of up to {length} tokens"
    if config.dataset in RECORD_DATASETS:
        shape = (f"of up to {length} tokens, {'whole records packed' if config.packing == 'on' else 'a record each'}"
                 ", completion tokens counted")
    return (f"{config.dataset}: {len(train)} train / {len(test)} validation sequences {shape}, "
            f"{train.total_targets:,} / {test.total_targets:,} target tokens, {tokens.name}")

"""How text becomes token ids: bytes for gpt, the model's own tokenizer for an hf:DIR model.

ByteTokens and ModelTokens turn a document into ids (a model's with its EOS after it), ids back into
text, and say which id pads a batch: byte 0, which never occurs in text, or hfdir.MASKED (-1). Each says
which id ends a document (byte 0 for bytes, which the token cache puts after each document when packing
joins them; a model's EOS, already in its ids) and what identifies it in a token cache's key.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gaccum_core.config import ConfigError, RunConfig, is_hf
from gaccum_core.words import first_line
from gaccum_core.hfdir import MASKED, directory_version, hf_directory

BYTE_PAD = 0   # byte 0 never occurs in text
BYTES = 256
# What a saved tokenizer leaves in its directory: a fast tokenizer's one file, or a slow one's vocabulary.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
# The files whose versions identify a saved tokenizer (its model's weights may change without it).
_TOKENIZER_VERSION = (*TOKENIZER_FILES, "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                      "merges.txt")


@dataclass(frozen=True)
class ByteTokens:
    """UTF-8 bytes as ids 0–255: gpt's tokenizer."""

    pad: int = BYTE_PAD
    vocab_size: int = BYTES
    name: str = "bytes"
    eos: int = BYTE_PAD  # what packing puts between documents: byte 0, never in text
    appends_eos: bool = False  # encode() gives the text's bytes alone

    @property
    def identity(self) -> dict:
        """What a token cache's key holds of this tokenizer."""
        return {"kind": "bytes"}

    def encode(self, text: str) -> list[int]:
        """The document's UTF-8 bytes."""
        return list(text.encode("utf-8"))

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """encode() of each document."""
        return [self.encode(text) for text in texts]

    def encode_arrays(self, texts: list[str]) -> list[np.ndarray]:
        """encode_many() as arrays (uint8), without a Python int per byte."""
        return [np.frombuffer(text.encode("utf-8"), dtype=np.uint8) for text in texts]

    def encode_records(self, records: list[tuple[str, str]]) -> list[tuple[np.ndarray, int]]:
        """(prompt's bytes, completion's bytes, byte 0 ending it; the prompt's length) of each record."""
        return [(np.frombuffer(f"{prompt}{completion}\0".encode("utf-8"), dtype=np.uint8), len(prompt.encode("utf-8")))
                for prompt, completion in records]

    def prompt(self, text: str) -> tuple[str, list[int]]:
        """(the text, its ids) to continue."""
        return text, self.encode(text)

    def decode(self, ids: list[int]) -> str:
        """Bytes back to text (a character cut in two becomes U+FFFD)."""
        return bytes(ids).decode("utf-8", errors="replace")


class ModelTokens:
    """A Hugging Face tokenizer saved beside its model: each document ends with its EOS."""

    pad = MASKED
    appends_eos = True  # encode() ends each document with its EOS

    def __init__(self, tokenizer: Any, name: str, version: tuple = ()) -> None:
        """version: the tokenizer's files and their modification times (hfdir.directory_version)."""
        self.tokenizer, self.name = tokenizer, name
        self.eos: int = tokenizer.eos_token_id  # never None: _model_tokens refuses a tokenizer without one
        self.vocab_size = len(tokenizer)
        files = [[file, mtime] for file, mtime in version if file in _TOKENIZER_VERSION]
        self.identity = {"kind": "hf", "name": name, "vocab_size": self.vocab_size, "files": files}

    def encode(self, text: str) -> list[int]:
        """The tokenizer's ids of the document (its own BOS, if it adds one), then EOS."""
        return list(self.tokenizer(text)["input_ids"]) + [self.eos]

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """encode() of each document, in one batched call of the fast tokenizer."""
        return [list(ids) + [self.eos] for ids in self.tokenizer(texts)["input_ids"]] if texts else []

    def encode_arrays(self, texts: list[str]) -> list[np.ndarray]:
        """encode_many() as arrays (int64), from the same batched call."""
        return [np.array(ids, dtype=np.int64) for ids in self.encode_many(texts)]

    def encode_records(self, records: list[tuple[str, str]]) -> list[tuple[np.ndarray, int]]:
        """(the prompt's ids (its BOS, if the tokenizer adds one), the completion's without special tokens, then
        EOS; the prompt's length) of each record, in two batched calls."""
        if not records:
            return []
        prompts = self.tokenizer([p for p, _ in records])["input_ids"]
        completions = self.tokenizer([c for _, c in records], add_special_tokens=False)["input_ids"]
        return [(np.array([*p, *c, self.eos], dtype=np.int64), len(p)) for p, c in zip(prompts, completions)]

    def prompt(self, text: str) -> tuple[str, list[int]]:
        """(the text without trailing space, its ids without EOS) to continue: a word-piece vocabulary
        marks a space at the start of the next word, and EOS would end the text."""
        text = text.rstrip()
        return text, list(self.tokenizer(text)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        """Ids back to text, special tokens left out."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def tokens_for(config: RunConfig) -> ByteTokens | ModelTokens:
    """The tokenizer of config.model: bytes for gpt, the directory's own for hf:DIR."""
    if not is_hf(config.model):
        return ByteTokens()
    path = hf_directory(config.model)
    return _model_tokens(config.model, str(path), directory_version(path))


@functools.lru_cache(maxsize=4)
def _model_tokens(model: str, path: str, version: tuple) -> ModelTokens:
    if not any((Path(path) / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError("model", model, f"a directory with its tokenizer (save it there with "
                          f"tokenizer.save_pretrained): {path} has no {', '.join(TOKENIZER_FILES)}")
    from transformers import AutoTokenizer  # on use: transformers takes seconds to import

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # its own OSError, ValueError, json or sentencepiece errors
        raise ConfigError("model", model, f"a directory whose tokenizer loads: {first_line(exc)}") from None
    if tokenizer.eos_token_id is None:
        raise ConfigError("model", model, "a tokenizer with an end-of-text token (eos_token), which gaccum puts "
                          "between documents: this one has none")
    return ModelTokens(tokenizer, f"the tokenizer of {path}", version)

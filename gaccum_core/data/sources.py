"""What every data set is: labelled samples addressed by index, a train and a test source, and the error
a data set that cannot be had raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch


class DataError(ValueError):
    """A dataset cannot be loaded; the message says which, where, and what to do."""


@runtime_checkable
class ImageSource(Protocol):
    """A set of labelled images addressed by sample index."""

    num_classes: int
    input_shape: tuple[int, int, int]  # (C, H, W) of the images batch() returns

    def __len__(self) -> int: ...

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x float32 (N, C, H, W) normalised, y int64 (N,), on the CPU, for these sample indices."""
        ...


@dataclass(frozen=True)
class DataBundle:
    """The train and test sources of one dataset."""

    name: str
    train: ImageSource
    test: ImageSource
    num_classes: int
    input_shape: tuple[int, ...]  # (C, H, W) of images; (max_seq_len,) of text
    tokens: Any = None  # text: how ids become text again (data.tokens), for the samples a language run shows
    # Which data this is, where its name does not say it (a corpus, a tokens folder): a checkpoint records it,
    # and a resume over other data is refused. Empty where the data set's name and settings fix the data.
    identity: str = ""

"""`MODULE:FUNCTION` or `FILE.py:FUNCTION` as the dataset: your function returns (train, test) datasets.

FUNCTION() is called with no arguments and returns two torch.utils.data.Dataset objects (anything with
__len__ and __getitem__) whose items are (float image tensor (C, H, W), int label). gaccum batches them by
index, as it batches its own data sets: the engine's sample order, windows and weighting stay its own.
The classes are the dataset's `classes` attribute when it has one (torchvision's datasets do), else
the largest training label + 1. The datasets are kept per process, keyed by the file's version.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.usercode import call_user_function, check_named, file_version, runs_here

_SHAPE = "items (float image tensor (C, H, W), int label)"


class DatasetImages:
    """An ImageSource over your Dataset: batch() stacks its items as float32 images and int64 labels."""

    def __init__(self, dataset: Any, num_classes: int, input_shape: tuple[int, int, int], name: str) -> None:
        self.dataset, self.num_classes, self.input_shape, self.name = dataset, num_classes, input_shape, name

    def __len__(self) -> int:
        return len(self.dataset)

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x float32 (N, C, H, W), y int64 (N,) of the items at these indices."""
        items = [self.dataset[int(i)] for i in indices]
        for i, item in zip(indices, items):
            _check_item(self.name, int(i), item, self.input_shape)
        x = torch.stack([item[0] for item in items]).float() if items else torch.empty(0, *self.input_shape)
        return x, torch.tensor([int(item[1]) for item in items], dtype=torch.int64)


def _check_item(name: str, index: int, item: Any, shape: tuple[int, ...] | None) -> None:
    """ConfigError naming the dataset field when an item is not (tensor of the set's shape, int label)."""
    def refuse(what: str) -> None:
        raise ConfigError("dataset", name, f"a function returning (train, test) datasets of {_SHAPE}: {what}")

    if not isinstance(item, (tuple, list)) or len(item) != 2:
        refuse(f"item {index} is a {type(item).__name__}, not a pair")
    image, label = item
    if not isinstance(image, torch.Tensor) or image.dim() != 3 or not image.is_floating_point():
        kind = f"a {image.dim()}-d {image.dtype} tensor" if isinstance(image, torch.Tensor) else f"a {type(image).__name__}"
        refuse(f"item {index}'s image is {kind}, not a float tensor (C, H, W)")
    if shape is not None and tuple(image.shape) != tuple(shape):
        refuse(f"item {index}'s image is {tuple(image.shape)}, item 0's {tuple(shape)}: every image one shape")
    is_int = isinstance(label, int) and not isinstance(label, bool)
    if not is_int and not (isinstance(label, torch.Tensor) and label.numel() == 1 and not label.is_floating_point()):
        refuse(f"item {index}'s label is a {type(label).__name__}, not an int")


def _classes(name: str, train: Any) -> int:
    names = getattr(train, "classes", None)
    if names is not None and len(names) >= 2:
        return len(names)
    labels = [int(train[i][1]) for i in range(len(train))]
    if min(labels) < 0:
        raise ConfigError("dataset", name, f"labels from 0 to the classes - 1: the train set has label {min(labels)}")
    if max(labels) < 1:
        raise ConfigError("dataset", name, "a train set with at least 2 classes: every label is 0")
    return max(labels) + 1


@functools.lru_cache(maxsize=2)
def _load(name: str, version: tuple[int, int] | None) -> tuple[DatasetImages, DatasetImages]:
    result = call_user_function("dataset", name, "a function returning (train, test) datasets")
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ConfigError("dataset", name, f"a function returning (train, test) datasets: it returned a "
                          f"{type(result).__name__}")
    for split, dataset in zip(("train", "test"), result):
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise ConfigError("dataset", name, f"a {split} dataset with __len__ and __getitem__: it is a "
                              f"{type(dataset).__name__}")
        if len(dataset) < 1:
            raise ConfigError("dataset", name, f"a {split} dataset with at least one item: it has none")
    train, test = result
    _check_item(name, 0, train[0], None)
    shape = tuple(train[0][0].shape)
    _check_item(name, 0, test[0], shape)
    classes = _classes(name, train)
    return (DatasetImages(train, classes, shape, name), DatasetImages(test, classes, shape, name))  # type: ignore[arg-type]


def user_sources(config: RunConfig) -> tuple[DatasetImages, DatasetImages]:
    """(train, test) of your dataset function config.dataset; ConfigError naming dataset when unusable."""
    return _load(config.dataset, file_version(config.dataset))


def describe_user(config: RunConfig) -> str:
    """One line: 'mydata:load: 200 train / 50 test, 1×8×8, 3 classes, your datasets'. Where your code may
    not run (the dashboard's server) the file is only read: the line says where the function was found."""
    if not runs_here():
        path = check_named("dataset", config.dataset)
        return (f"{config.dataset}: your datasets, found in {path.name}; loaded by the run's worker process on "
                "Start (the dashboard's server never runs your code)")
    train, test = user_sources(config)
    dims = "×".join(str(d) for d in train.input_shape)
    return f"{config.dataset}: {len(train)} train / {len(test)} test, {dims}, {train.num_classes} classes, your datasets"

"""Image data sets as sources: batch(indices) gives normalised float32 images and int64 labels.

Small and uint8 data sets live in memory as tensors (one indexing op per batch); generated data
(`fake`) is produced per sample on demand. Nothing here resizes for a model: models.vision does.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch

from gaccum_core.config import IMAGE_DATASETS, RunConfig
from gaccum_core.data.sources import DataError, ImageSource
from gaccum_core.seeding import isolated_rng

# Per-channel mean/std of pixel values scaled to [0, 1] (digits: its 0..16 range divided by 16).
_STATS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "digits": ((0.3053,), (0.3761,)),
    "mnist": ((0.1307,), (0.3081,)),
    "fashionmnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "fake": ((0.5,) * 3, (0.2887,) * 3),  # FakeData pixels are close to uniform on [0, 1]
}
DIGITS_SPLIT_SEED = 0


class Normalizer:
    """Maps raw pixel values to (value / scale - mean) / std, per channel, in place."""

    def __init__(self, stats: tuple[Sequence[float], Sequence[float]], scale: float) -> None:
        mean = torch.tensor(stats[0], dtype=torch.float32).view(1, -1, 1, 1)
        std = torch.tensor(stats[1], dtype=torch.float32).view(1, -1, 1, 1)
        # Folded into one multiply-add so the hot path makes no temporaries.
        self.mul = 1.0 / (scale * std)
        self.add = -mean / std

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul_(self.mul).add_(self.add)


class TensorImages:
    """Images (N, C, H, W) and labels (N,) held in memory, kept in their source dtype."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, num_classes: int,
                 normalizer: Normalizer) -> None:
        if images.dim() != 4 or images.shape[0] != labels.shape[0]:
            raise ValueError(f"images {tuple(images.shape)} and labels {tuple(labels.shape)} do not match")
        self.images = images
        self.labels = labels.to(torch.int64)
        self.num_classes = num_classes
        channels, height, width = images.shape[1:]
        self.input_shape = (channels, height, width)
        self._normalize = normalizer

    def __len__(self) -> int:
        return self.images.shape[0]

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised float32 images and int64 labels for these indices."""
        # Advanced indexing copies, so normalising the float copy in place is safe.
        x = self.images[indices].to(torch.float32)
        return self._normalize(x), self.labels[indices]


class LazyImages:
    """A map-style dataset of (float image tensor in [0, 1], int label), read sample by sample."""

    def __init__(self, dataset: Any, num_classes: int, input_shape: tuple[int, int, int],
                 normalizer: Normalizer) -> None:
        self.dataset = dataset
        self.num_classes = num_classes
        self.input_shape = input_shape
        self._normalize = normalizer

    def __len__(self) -> int:
        return len(self.dataset)

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised float32 images and int64 labels for these indices."""
        # FakeData calls torch.manual_seed per sample, which reseeds the global CPU and CUDA
        # generators: fork them so a run's own randomness is untouched, one thread at a time.
        with isolated_rng(include_cuda=True):
            items = [self.dataset[i] for i in indices.tolist()]
        if not items:
            return torch.empty(0, *self.input_shape), torch.empty(0, dtype=torch.int64)
        x = torch.stack([image for image, _ in items]).to(torch.float32)
        y = torch.tensor([label for _, label in items], dtype=torch.int64)
        return self._normalize(x), y


class _Official(NamedTuple):
    class_name: str  # in torchvision.datasets
    subdir: str  # where torchvision looks under data_dir
    train_size: int
    test_size: int
    shape: tuple[int, int, int]


_OFFICIAL = {
    "mnist": _Official("MNIST", "MNIST/raw", 60_000, 10_000, (1, 28, 28)),
    "fashionmnist": _Official("FashionMNIST", "FashionMNIST/raw", 60_000, 10_000, (1, 28, 28)),
    "cifar10": _Official("CIFAR10", "cifar-10-batches-py", 50_000, 10_000, (3, 32, 32)),
}
_official_cache: dict[tuple[str, str], tuple[TensorImages, TensorImages]] = {}


def image_sources(config: RunConfig) -> tuple[ImageSource, ImageSource]:
    """(train, test) of an image data set; DataError if they cannot be had."""
    name = config.dataset
    if name == "digits":
        return _digits()
    if name == "fake":
        return _fake(config.fake_samples, config.fake_classes, config.image_size or 32)
    if name in _OFFICIAL:
        return _load_official(name, _resolve(config.data_dir), config.download)
    raise DataError(f"unknown image data set {name!r}: choose one of {', '.join(IMAGE_DATASETS)}")


def describe_images(config: RunConfig) -> str:
    """One line such as 'digits: 1437 train / 360 test, 1×8×8, 10 classes' (reads no files)."""
    name = config.dataset
    if name == "digits":
        train, test = _digits()
        sizes, shape, classes = (len(train), len(test)), train.input_shape, train.num_classes
    elif name == "fake":
        side = config.image_size or 32
        sizes, shape, classes = _fake_sizes(config.fake_samples), (3, side, side), config.fake_classes
    elif name in _OFFICIAL:
        spec = _OFFICIAL[name]
        sizes, shape, classes = (spec.train_size, spec.test_size), spec.shape, 10
    else:
        raise DataError(f"unknown image data set {name!r}: choose one of {', '.join(IMAGE_DATASETS)}")
    dims = "×".join(str(d) for d in shape)
    return f"{name}: {sizes[0]} train / {sizes[1]} test, {dims}, {classes} classes"


def digits_split(n_samples: int = 1797) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, test) row indices into load_digits(): a fixed permutation, last 20% for test."""
    # Its own generator: the split must not depend on, or disturb, the run's seed.
    order = torch.randperm(n_samples, generator=torch.Generator().manual_seed(DIGITS_SPLIT_SEED))
    n_test = -(-n_samples // 5)  # ceil: 360 of 1797
    return order[: n_samples - n_test], order[n_samples - n_test:]


def _digits_file() -> Path:
    """scikit-learn's bundled digits.csv.gz (what load_digits reads), found without importing sklearn."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        raise DataError("the digits data set comes with scikit-learn, which is not installed: "
                        "pip install -r requirements.txt")
    return Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[TensorImages, TensorImages]:
    # load_digits() would import scikit-learn (~1 s, on the path of every Train page's first draw and
    # every run's start); its data is one CSV of 64 pixels and the label per row, read here directly.
    raw = np.loadtxt(_digits_file(), delimiter=",", dtype=np.float32)
    images = torch.from_numpy(raw[:, :-1].reshape(-1, 1, 8, 8)).to(torch.uint8)  # (1797, 1, 8, 8), 0..16
    labels = torch.from_numpy(raw[:, -1]).to(torch.int64)
    normalizer = Normalizer(_STATS["digits"], scale=16.0)
    train_idx, test_idx = digits_split(images.shape[0])
    return (TensorImages(images[train_idx], labels[train_idx], 10, normalizer),
            TensorImages(images[test_idx], labels[test_idx], 10, normalizer))


def _fake_sizes(samples: int) -> tuple[int, int]:
    return samples, max(samples // 5, 1)


def _fake(samples: int, classes: int, side: int) -> tuple[LazyImages, LazyImages]:
    import torchvision  # on use: importing it pulls in torch._dynamo, 2 s of every worker's start

    shape = (3, side, side)
    normalizer = Normalizer(_STATS["fake"], scale=1.0)
    to_tensor = torchvision.transforms.ToTensor()
    n_train, n_test = _fake_sizes(samples)
    # FakeData seeds each sample from index + random_offset, so the test offset keeps the sets apart.
    train = torchvision.datasets.FakeData(size=n_train, image_size=shape, num_classes=classes,
                                          transform=to_tensor, random_offset=0)
    test = torchvision.datasets.FakeData(size=n_test, image_size=shape, num_classes=classes,
                                         transform=to_tensor, random_offset=samples)
    return (LazyImages(train, classes, shape, normalizer),
            LazyImages(test, classes, shape, normalizer))


def _resolve(data_dir: str) -> Path:
    return Path(data_dir).expanduser().resolve()


def _load_official(name: str, root: Path, download: bool) -> tuple[TensorImages, TensorImages]:
    key = (name, str(root))
    if key not in _official_cache:
        _official_cache[key] = (_read_split(name, root, download, train=True),
                                _read_split(name, root, download, train=False))
    return _official_cache[key]


def _read_split(name: str, root: Path, download: bool, train: bool) -> TensorImages:
    import torchvision  # on use, as in _fake

    spec = _OFFICIAL[name]
    dataset_class = getattr(torchvision.datasets, spec.class_name)
    try:
        dataset = dataset_class(root=str(root), train=train, download=download)
    except (RuntimeError, OSError) as exc:
        raise _fetch_error(name, root, download, exc) from exc
    except Exception as exc:  # a truncated or foreign file: torchvision asserts, pickle errors, ...
        raise DataError(f"{name} files in {root / spec.subdir} could not be read ({_last_line(exc)}): "
                        "delete them and download again") from exc
    images = torch.as_tensor(dataset.data)
    # MNIST-style data is (N, H, W); CIFAR's is numpy (N, H, W, C).
    images = images.unsqueeze(1) if images.dim() == 3 else images.permute(0, 3, 1, 2).contiguous()
    labels = torch.as_tensor(dataset.targets, dtype=torch.int64)
    return TensorImages(images, labels, 10, Normalizer(_STATS[name], scale=255.0))


def _fetch_error(name: str, root: Path, download: bool, exc: BaseException) -> DataError:
    folder = root / _OFFICIAL[name].subdir
    if download:
        return DataError(f"downloading {name} into {root} failed: {_last_line(exc)}. "
                         f"Check the network connection, or place the files in {folder}")
    return DataError(f"{name} not found (or incomplete) in {folder} and download is off: "
                     f"pass --download (CLI) or tick 'download' (UI), or place the files there")


def _last_line(exc: BaseException) -> str:
    # torchvision's download errors span lines; the last one holds the cause.
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__

"""`imagefolder`: the practitioner's own images, one sub-folder per class (torchvision's ImageFolder).

DIR/train with DIR/val (or DIR/test) when both exist; otherwise every image of DIR, split once by a
fixed seed (the last fifth of a seeded permutation is the test set), so every run sees the same split.
Images are decoded as RGB, resized to image_size (0: the first training image's size) and kept in
memory as uint8, normalised with ImageNet's per-channel statistics (the usual ones for photographs).
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from gaccum_core.config import RunConfig
from gaccum_core.data.images import TensorImages, Normalizer
from gaccum_core.data.sources import DataError

IMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
SPLIT_SEED = 0
TEST_NAMES = ("val", "test")
MAX_IN_MEMORY_BYTES = 4 * 1024**3  # decoded uint8 pixels of both splits


def _splits(root: Path) -> tuple[Path, Path | None]:
    """(train folder, test folder or None for a seeded split of train)."""
    test = next((root / name for name in TEST_NAMES if (root / name).is_dir()), None)
    if (root / "train").is_dir() and test is not None:
        return root / "train", test
    return root, None


def _folder(path: Path):
    import torchvision  # on use: importing it pulls in torch._dynamo (2 s per process)

    try:
        return torchvision.datasets.ImageFolder(str(path))
    except FileNotFoundError as exc:  # no class folder, or no image in any
        raise DataError(f"data_dir {path} holds no images in class folders (DIR/<class>/<image>.png, "
                        f"or DIR/train/<class>/… with DIR/val/<class>/…): {exc}") from None


def _check(root: Path) -> Path:
    if not root.is_dir():
        raise DataError(f"data_dir {root} is not a directory: give a folder with one sub-folder of images per class")
    return root


def _decode(dataset, indices: list[int], side: tuple[int, int]) -> torch.Tensor:
    """The images at indices as one (N, 3, H, W) uint8 tensor, resized to side where they differ."""
    from torchvision.transforms.functional import pil_to_tensor, resize

    images = torch.empty(len(indices), 3, *side, dtype=torch.uint8)
    for row, index in enumerate(indices):
        path = dataset.samples[index][0]
        try:
            image = pil_to_tensor(dataset.loader(path))
        except Exception as exc:  # PIL raises many types for a truncated or foreign file
            raise DataError(f"image {path} cannot be read ({type(exc).__name__}: {exc})") from None
        images[row] = image if tuple(image.shape[1:]) == side else resize(image, list(side), antialias=True)
    return images


def _stamp(root: Path) -> tuple[tuple[str, int], ...]:
    """The folders' modification times (the root, class folders, train/ and val/ and theirs): an image
    added, removed or renamed changes one, so a cached decode is not reused for an edited folder."""
    if not root.is_dir():
        return ()
    folders = [root, *(p for p in root.iterdir() if p.is_dir())]
    folders += [p for split in folders[1:] if split.name in ("train", *TEST_NAMES) for p in split.iterdir() if p.is_dir()]
    return tuple((str(p), p.stat().st_mtime_ns) for p in folders)


@functools.lru_cache(maxsize=2)
def _load(root: str, image_size: int, stamp: tuple[tuple[str, int], ...]) -> tuple[TensorImages, TensorImages]:
    train_dir, test_dir = _splits(_check(Path(root)))
    train = _folder(train_dir)
    if len(train.classes) < 2:
        raise DataError(f"data_dir {train_dir} has {len(train.classes)} class folder"
                        f"{'s' * (len(train.classes) != 1)}: a classifier needs at least 2")
    if test_dir is None:
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(SPLIT_SEED)).tolist()
        n_test = max(len(order) // 5, 1)
        sources, train_idx, test_idx = (train, train), order[: len(order) - n_test], order[len(order) - n_test:]
    else:
        test = _folder(test_dir)
        if test.classes != train.classes:
            raise DataError(f"{test_dir} has classes {test.classes}, {train_dir} has {train.classes}: "
                            "they must be the same folders")
        sources, train_idx, test_idx = (train, test), list(range(len(train))), list(range(len(test)))
    if not train_idx:
        raise DataError(f"data_dir {root} has {len(train)} image: too few to hold some out for testing")
    side = (image_size, image_size) if image_size > 0 else _first_size(train, train_idx[0])
    pixels = 3 * side[0] * side[1] * (len(train_idx) + len(test_idx))
    if pixels > MAX_IN_MEMORY_BYTES:
        raise DataError(f"{len(train_idx) + len(test_idx)} images of 3×{side[0]}×{side[1]} take "
                        f"{pixels / 2**30:.1f} GiB decoded, over {MAX_IN_MEMORY_BYTES / 2**30:.0f} GiB: "
                        "set a smaller image_size")
    normalizer = Normalizer(IMAGENET_STATS, scale=255.0)
    classes = len(train.classes)
    splits = []
    for dataset, indices in zip(sources, (train_idx, test_idx)):
        labels = torch.tensor([dataset.targets[i] for i in indices], dtype=torch.int64)
        splits.append(TensorImages(_decode(dataset, indices, side), labels, classes, normalizer))
    return splits[0], splits[1]


def _first_size(dataset, index: int) -> tuple[int, int]:
    from torchvision.transforms.functional import pil_to_tensor

    return tuple(pil_to_tensor(dataset.loader(dataset.samples[index][0])).shape[1:])  # type: ignore[return-value]


def folder_sources(config: RunConfig) -> tuple[TensorImages, TensorImages]:
    """(train, test) of config.data_dir's image folders; DataError naming the folder when unusable."""
    root = Path(config.data_dir).expanduser().resolve()
    return _load(str(root), config.image_size, _stamp(root))


def describe_folder(config: RunConfig) -> str:
    """One line: 'imagefolder: 120 train / 30 test, 3×32×32, 3 classes (cats, dogs, owls)'."""
    train, test = folder_sources(config)
    names = _folder(_splits(Path(config.data_dir).expanduser().resolve())[0]).classes
    shown = ", ".join(names[:5]) + (", …" if len(names) > 5 else "")
    dims = "×".join(str(d) for d in train.input_shape)
    return f"imagefolder: {len(train)} train / {len(test)} test, {dims}, {train.num_classes} classes ({shown})"

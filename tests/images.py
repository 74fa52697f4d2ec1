"""Image folders written by the tests: PNGs through PIL, read back by the real loading code."""

from pathlib import Path

import torch
from PIL import Image

CLASSES = ("circle", "cross", "square")


def write_pngs(root: Path, per_class: int, side: int = 12, seed: int = 0, sizes: tuple[int, ...] = ()) -> Path:
    """per_class PNGs of each class: noise, with the class's channel brighter (so there is something to learn)."""
    generator = torch.Generator().manual_seed(seed)
    for label, name in enumerate(CLASSES):
        folder = root / name
        folder.mkdir(parents=True)
        for i in range(per_class):
            size = sizes[i % len(sizes)] if sizes else side
            pixels = torch.randint(0, 128, (size, size, 3), generator=generator, dtype=torch.uint8)
            pixels[..., label] += 100
            Image.fromarray(pixels.numpy()).save(folder / f"{i:03d}.png")
    return root

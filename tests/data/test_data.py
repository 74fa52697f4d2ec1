"""Datasets: shapes, deterministic splits, normalisation, and clear errors for missing files."""

from __future__ import annotations

import errno
import io
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
import torchvision

from gaccum_core import config
from gaccum_core.config import RunConfig
from gaccum_core.data.images import digits_split
from gaccum_core.data.load import describe_dataset, load_data
from gaccum_core.data.sources import DataBundle, DataError, ImageSource


class _TinyTorchvisionSet:
    """Stands in for torchvision's MNIST, FashionMNIST and CIFAR10: the same fields, 6 train / 3 test
    images, so every official data set loads without files or a network."""

    def __init__(self, root: str, train: bool, download: bool, rgb: bool) -> None:
        n = 6 if train else 3
        # torchvision keeps MNIST-style images as a uint8 tensor (N, 28, 28), CIFAR's as numpy (N, 32, 32, 3).
        self.data = np.zeros((n, 32, 32, 3), np.uint8) if rgb else torch.zeros(n, 28, 28, dtype=torch.uint8)
        self.targets = [i % 10 for i in range(n)]


@pytest.fixture
def tiny_official_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    for class_name, rgb in (("MNIST", False), ("FashionMNIST", False), ("CIFAR10", True)):
        monkeypatch.setattr(torchvision.datasets, class_name,
                            lambda root, train, download, rgb=rgb: _TinyTorchvisionSet(root, train, download, rgb))


@pytest.mark.parametrize("name", config.IMAGE_DATASETS)
def test_every_configured_dataset_loads_and_matches_its_description(name: str, tiny_official_sets: None,
                                                                    tmp_path: Path) -> None:
    """Every name the config accepts must be one load_data can load and describe_dataset can describe,
    with the same shape and classes (describe_dataset reads no files, so it could drift from load_data)."""
    cfg = RunConfig(dataset=name, data_dir=str(tmp_path), fake_samples=10)
    if name == "imagefolder":  # two class folders of three 10×10 PNGs
        for label in ("a", "b"):
            (tmp_path / label).mkdir()
            for i in range(3):
                Image.new("RGB", (10, 10), (40 * i, 0, 0)).save(tmp_path / label / f"{i}.png")
    bundle = load_data(cfg)
    assert bundle.name == name and len(bundle.train) > 0 and len(bundle.test) > 0
    x, y = bundle.train.batch(torch.arange(2))
    assert x.shape == (2, *bundle.input_shape) and x.dtype == torch.float32 and y.dtype == torch.int64
    dims = "×".join(str(d) for d in bundle.input_shape)
    description = describe_dataset(cfg)
    assert description.startswith(f"{name}: ")
    # An image folder's line goes on with its class names: "…, 2 classes (a, b)".
    assert description.removesuffix(" (a, b)").endswith(f", {dims}, {bundle.num_classes} classes"), description


def test_an_unknown_dataset_is_refused_naming_every_choice() -> None:
    with pytest.raises(config.ConfigError, match="dataset='imagenet'"):
        RunConfig(dataset="imagenet")
    # A name the config let through but data.py does not know: refused clearly, not a KeyError.
    cfg = RunConfig()
    object.__setattr__(cfg, "dataset", "imagenet")  # bypass the frozen config's validation
    for read in (load_data, describe_dataset):
        with pytest.raises(DataError) as info:
            read(cfg)
        message = str(info.value)
        assert "unknown dataset 'imagenet'" in message
        assert all(name in message for name in config.DATASETS), message


def test_digits_shapes_and_classes() -> None:
    bundle = load_data(RunConfig(dataset="digits"))
    assert isinstance(bundle, DataBundle)
    assert (len(bundle.train), len(bundle.test)) == (1437, 360)
    assert bundle.input_shape == bundle.train.input_shape == (1, 8, 8)
    assert bundle.num_classes == 10
    assert isinstance(bundle.train, ImageSource)
    _, y = bundle.train.batch(torch.arange(len(bundle.train)))
    assert set(y.tolist()) == set(range(10))


def test_digits_split_is_fixed_disjoint_and_ignores_run_seed() -> None:
    torch.manual_seed(123)
    train_a, test_a = digits_split()
    torch.manual_seed(456)
    train_b, test_b = digits_split()
    assert torch.equal(train_a, train_b) and torch.equal(test_a, test_b)
    assert set(train_a.tolist()).isdisjoint(test_a.tolist())
    assert sorted(train_a.tolist() + test_a.tolist()) == list(range(1797))
    first = load_data(RunConfig(seed=1)).test.batch(torch.arange(360))[0]
    second = load_data(RunConfig(seed=2)).test.batch(torch.arange(360))[0]
    assert torch.equal(first, second)


def test_digits_batch_dtype_shape_and_normalisation() -> None:
    train = load_data(RunConfig()).train
    x, y = train.batch(torch.arange(len(train)))
    assert x.dtype == torch.float32 and y.dtype == torch.int64
    assert x.shape == (1437, 1, 8, 8) and y.shape == (1437,)
    assert abs(x.mean().item()) < 0.05 and abs(x.std().item() - 1.0) < 0.05


def test_batch_is_a_copy_and_follows_the_indices() -> None:
    train = load_data(RunConfig()).train
    idx = torch.tensor([5, 0, 5])
    x, y = train.batch(idx)
    x.add_(100.0)  # must not reach the stored images
    again, y_again = train.batch(idx)
    assert torch.equal(again[0], again[2]) and again.abs().max() < 50
    assert torch.equal(y, y_again) and y[0] == y[2]


def test_fake_is_deterministic_and_honours_the_config() -> None:
    cfg = RunConfig(dataset="fake", fake_samples=40, fake_classes=3, image_size=16)
    first, second = load_data(cfg), load_data(cfg)
    assert (len(first.train), len(first.test)) == (40, 8)
    assert first.input_shape == (3, 16, 16) and first.num_classes == 3
    idx = torch.tensor([0, 7, 39])
    x1, y1 = first.train.batch(idx)
    x2, y2 = second.train.batch(idx)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert x1.shape == (3, 3, 16, 16) and x1.dtype == torch.float32 and y1.dtype == torch.int64
    _, y_all = first.train.batch(torch.arange(40))
    assert 0 <= y_all.min() and y_all.max() < 3
    test_x, _ = first.test.batch(torch.tensor([0]))
    assert not torch.equal(test_x[0], x1[0])  # test samples are not copies of train samples


def test_fake_default_size_and_global_rng_untouched() -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    bundle = load_data(RunConfig(dataset="fake", fake_samples=10))
    bundle.train.batch(torch.arange(4))
    assert bundle.input_shape == (3, 32, 32) and len(bundle.test) == 2
    assert torch.equal(torch.rand(3), expected)


def test_mnist_missing_without_download_names_path_and_fix(tmp_path: Path) -> None:
    with pytest.raises(DataError) as info:
        load_data(RunConfig(dataset="mnist", data_dir=str(tmp_path), download=False))
    message = str(info.value)
    assert str(tmp_path.resolve()) in message and "download" in message


def test_failed_download_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Error downloading x.gz:\nTried https://host/, got:\n<urlopen error offline>\n")

    monkeypatch.setattr(torchvision.datasets, "FashionMNIST", offline)
    with pytest.raises(DataError) as info:
        load_data(RunConfig(dataset="fashionmnist", data_dir=str(tmp_path), download=True))
    message = str(info.value)
    assert "<urlopen error offline>" in message and str(tmp_path.resolve()) in message
    assert "\n" not in message


def _write_idx(path: Path, array: np.ndarray) -> None:
    magic = 0x0800 + array.ndim  # unsigned byte data
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def test_mnist_from_local_files_is_uint8_and_normalised(tmp_path: Path) -> None:
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 12), ("t10k", 5)):
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)))
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", np.arange(n) % 10)
    bundle = load_data(RunConfig(dataset="mnist", data_dir=str(tmp_path)))
    assert (len(bundle.train), len(bundle.test)) == (12, 5)
    assert bundle.input_shape == (1, 28, 28) and bundle.train.images.dtype == torch.uint8
    x, y = bundle.train.batch(torch.tensor([0, 11]))
    assert x.shape == (2, 1, 28, 28) and y.tolist() == [0, 1]
    expected = (bundle.train.images[0].float() / 255 - 0.1307) / 0.3081
    assert torch.allclose(x[0], expected, atol=1e-5)


def test_cifar_images_become_channels_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class TinyCifar:
        def __init__(self, root: str, train: bool, download: bool) -> None:
            self.data = np.zeros((4, 32, 32, 3), dtype=np.uint8)
            self.data[..., 2] = 255  # blue channel only
            self.targets = [0, 1, 2, 3]

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", TinyCifar)
    bundle = load_data(RunConfig(dataset="cifar10", data_dir=str(tmp_path)))
    assert bundle.input_shape == (3, 32, 32)
    x, _ = bundle.test.batch(torch.arange(4))
    assert x[:, 2].min() > 1.0 and x[:, 0].max() < 0.0


def test_describe_dataset() -> None:
    assert describe_dataset(RunConfig()) == "digits: 1437 train / 360 test, 1×8×8, 10 classes"
    fake = RunConfig(dataset="fake", fake_samples=100, fake_classes=4, image_size=24)
    assert describe_dataset(fake) == "fake: 100 train / 20 test, 3×24×24, 4 classes"
    assert describe_dataset(RunConfig(dataset="cifar10")).startswith("cifar10: 50000 train / 10000 test, 3×32×32")
    bundle = load_data(fake)
    assert f"{len(bundle.train)} train / {len(bundle.test)} test" in describe_dataset(fake)


@pytest.mark.parametrize("name", ["pydoc", "text"])  # tokens, hf-dataset: test_token_files, test_hf_datasets
def test_every_text_dataset_loads_and_matches_its_description(name: str, tmp_path: Path) -> None:
    """Text: sequences of different lengths padded per batch, padding without targets; the description
    counts the same sequences and target tokens that load_data gives."""
    text_file = tmp_path / "notes.txt"
    text_file.write_text("\n\n".join("word " * (5 + 9 * i) for i in range(15)), encoding="utf-8")
    cfg = RunConfig(model="gpt", dataset=name, text_file=str(text_file), max_seq_len=16)
    bundle = load_data(cfg)
    assert bundle.name == name and len(bundle.train) > 0 and len(bundle.test) > 0
    lengths = bundle.train.targets
    assert lengths.max() == 16 and lengths.min() < 16  # a document's last chunk is shorter
    short, full = int(lengths.argmin()), int(lengths.argmax())
    x, y = bundle.train.batch(torch.tensor([short, full]))
    assert x.shape == y.shape == (2, 16) and x.dtype == y.dtype == torch.int64
    assert (y[0] != -100).sum() == lengths[short] and (y[1] != -100).sum() == 16
    description = describe_dataset(cfg)
    assert description.startswith(f"{name}: {len(bundle.train)} train / {len(bundle.test)} validation sequences")
    assert f"{int(lengths.sum()):,} / {int(bundle.test.targets.sum()):,} target tokens" in description


def test_digits_read_without_scikit_learn_equal_load_digits():
    """The digits are read from scikit-learn's own CSV without importing it (1 s off every first draw
    and run start), and they are load_digits()'s images and labels, split as before."""
    import subprocess
    import sys

    code = ("import sys; from gaccum_core.data.images import _digits; _digits(); "
            "print('sklearn' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
    from sklearn.datasets import load_digits

    from gaccum_core.data.images import _digits, digits_split

    raw = load_digits()
    train_idx, test_idx = digits_split(len(raw.target))
    train, test = _digits()
    for part, idx in ((train, train_idx), (test, test_idx)):
        assert torch.equal(part.images, torch.from_numpy(raw.images[idx.numpy()]).to(torch.uint8).unsqueeze(1))
        assert torch.equal(part.labels, torch.from_numpy(raw.target[idx.numpy()]).to(torch.int64))


@pytest.mark.parametrize("where,words", [
    ("/proc/self/mem", "is under /proc, the kernel's own files"),  # a traceback (EIO) before
    ("/proc/self/environ", "is under /proc, the kernel's own files"),  # of size 0, yet it reads
    ("{tmp}/mem.txt", "is under /proc, the kernel's own files"),  # a link to /proc/self/mem
    ("/sys/kernel/uevent_seqnum", "is under /sys, the kernel's own files"),
    ("/dev/zero", "a regular file: this is a character device"),
    ("{tmp}/pipe.txt", "a regular file: this is a FIFO"),
    ("{tmp}/empty", "a directory of .txt or .jsonl files (its shards): this is a directory with none"),
], ids=["proc-mem", "proc-environ", "link-to-proc", "sys", "dev-zero", "fifo", "directory"])
def test_a_text_file_that_is_no_file_of_text_is_one_line_naming_text_file(tmp_path: Path, capsys, where, words):
    """On the command line (in this process): exit 2, one line, no run directory."""
    from gaccum_core.cli.main import main

    (tmp_path / "mem.txt").symlink_to("/proc/self/mem")
    os.mkfifo(tmp_path / "pipe.txt")
    (tmp_path / "empty").mkdir()
    path = where.replace("{tmp}", str(tmp_path))
    code = main(["run", "--model", "gpt", "--dataset", "text", "--text-file", path, "--device", "cpu",
                 "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"gaccum: error: --text-file={path!r} is not allowed: ") and words in err[0], err[0]
    assert not (tmp_path / "runs").exists()


def test_a_text_file_that_fails_as_it_is_read_is_one_line_naming_text_file(tmp_path: Path, monkeypatch) -> None:
    """A read that fails (a disk's EIO, a network file system gone) after the checks passed."""
    from gaccum_core.data import corpus

    class FailingFile(io.FileIO):
        def read(self, size: int = -1) -> bytes:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    notes = tmp_path / "notes.txt"
    notes.write_text("one paragraph\n\nanother one\n", encoding="utf-8")
    monkeypatch.setattr(corpus.os, "fdopen", lambda fd, mode: FailingFile(fd, "rb"))
    with pytest.raises(config.ConfigError) as caught:
        load_data(RunConfig(model="gpt", dataset="text", text_file=str(notes)))
    assert caught.value.field == "text_file" and "cannot be read (Input/output error)" in str(caught.value)

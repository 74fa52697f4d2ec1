"""The cost of verifying a token cache when it is opened (issue 40 #1): cache_check.damage over a whole cache.

For each size, a synthetic cache of that many MB of uint16 ids (a byte vocabulary, gpt's) is written with
np.memmap into a temporary folder: documents of random lengths, each followed by byte 0, every tenth held out,
with their spans and meta.json, as a build leaves them. Then, median of --repeats:

- verify: cache_check.damage (every check of the format: meta, sizes, spans, every id below the vocabulary);
- read: the same files read through once in the same chunks, nothing checked: the baseline the ratio is to;
- each warm (the files in the page cache, as right after a build) and cold (their pages dropped first with
  posix_fadvise, as after a reboot: the disk's speed).

The folder is deleted at the end.

    .venv/bin/python bench/bench_cache_verify.py [--sizes 8,128,1024] [--repeats 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import load_average  # noqa: E402
from gaccum_core.data import cache_check  # noqa: E402
from gaccum_core.data.token_cache import FORMAT, LAYOUT  # noqa: E402

VOCAB = 256
DOCUMENT_IDS = 4096  # a document's mean length
BLOCK_IDS = 1 << 24  # ids written at once


def write_cache(folder: Path, megabytes: int, rng: np.random.Generator) -> None:
    """A cache of about megabytes MB of uint16 ids, written a block at a time through np.memmap."""
    folder.mkdir(parents=True)
    total = megabytes * 2**20 // 2
    lengths = rng.integers(1, 2 * DOCUMENT_IDS, total // DOCUMENT_IDS)
    held_out = np.arange(len(lengths)) % 10 == 0
    meta = {"format": FORMAT, "dtype": "uint16", "tokens": {}, "documents": {}}
    for split, mine in (("train", lengths[~held_out]), ("val", lengths[held_out])):
        ends = np.cumsum(mine + 1) - 1  # each document, then its byte 0
        starts = ends - mine
        count = int(ends[-1] + 1)
        ids = np.memmap(folder / f"{split}.bin", dtype=np.uint16, mode="w+", shape=(count,))
        for start in range(0, count, BLOCK_IDS):
            ids[start:start + BLOCK_IDS] = rng.integers(1, VOCAB, min(BLOCK_IDS, count - start), dtype=np.uint16)
        ids[ends] = 0
        ids.flush()
        del ids
        spans = np.lib.format.open_memmap(folder / f"{split}_docs.npy", mode="w+", dtype=np.int64,
                                          shape=(len(mine), 2))
        spans[:, 0], spans[:, 1] = starts, ends
        spans.flush()
        del spans
        meta["tokens"][split], meta["documents"][split] = count, len(mine)
    (folder / cache_check.META).write_text(json.dumps(meta), encoding="utf-8")


def read_through(folder: Path) -> None:
    """Every file of the cache read once, in the checks' chunks, nothing checked."""
    buffer = bytearray(cache_check.CHUNK_BYTES)
    for name in LAYOUT.files:
        with open(folder / name, "rb", buffering=0) as file:
            while file.readinto(buffer):
                pass


def drop_pages(folder: Path) -> None:
    """The cache's pages out of the page cache (its files only; written and synced, so they can go)."""
    for name in LAYOUT.files:
        fd = os.open(folder / name, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def medians_s(actions: list[Callable[[], object]], repeats: int, before: Callable[[], None]) -> list[float]:
    """The median seconds of each action over repeats, taken in turn (load that drifts weighs on each alike),
    before() run untimed ahead of every one."""
    times: list[list[float]] = [[] for _ in actions]
    for _ in range(repeats):
        for action, taken in zip(actions, times):
            before()
            start = time.perf_counter()
            action()
            taken.append(time.perf_counter() - start)
    return [statistics.median(taken) for taken in times]


def verify(folder: Path) -> None:
    """cache_check.damage, which must find the synthetic cache whole."""
    why = cache_check.damage(folder, LAYOUT, VOCAB)
    if why is not None:
        raise SystemExit(f"the synthetic cache is not whole: {why}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,128,1024", help="cache sizes in MB of ids, comma-separated")
    parser.add_argument("--repeats", type=int, default=5, help="timings per size and state (median shown)")
    parser.add_argument("--workdir", default="", help="where the caches go (default: a temporary folder)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-cache-verify-", dir=args.workdir or None))
    print(f"{load_average()}; chunks of {cache_check.CHUNK_BYTES >> 20} MB")
    print(f"{'MB':>6} {'state':>5} {'verify s':>9} {'MB/s':>8} {'read s':>8} {'MB/s':>8} {'verify/read':>12}")
    try:
        for megabytes in (int(size) for size in args.sizes.split(",")):
            folder = work / f"cache-{megabytes}"
            write_cache(folder, megabytes, np.random.default_rng(megabytes))
            size = sum((folder / name).stat().st_size for name in LAYOUT.files) / 2**20
            for state, before in (("warm", lambda: None), ("cold", lambda: drop_pages(folder))):
                checked, read = medians_s([lambda: verify(folder), lambda: read_through(folder)], args.repeats,
                                          before)
                print(f"{megabytes:>6} {state:>5} {checked:>9.3f} {size / checked:>8.0f} {read:>8.3f} "
                      f"{size / read:>8.0f} {checked / read:>12.2f}")
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

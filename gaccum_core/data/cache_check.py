"""Whether a token cache folder holds what its meta.json says: checked when it is opened, and remembered.

A cache is derived data that a disk, a copy or a hand can damage, and a damaged one must never be trained on.
Each format of the folder (LAYOUTS) names its files and its checks, run in order, the files streamed a chunk at
a time: meta.json's dtype is exactly the one the tokenizer's vocabulary needs; each split's ids fill its file;
its spans are int64 of shape (documents, 2), in order and inside its ids; every id is below the vocabulary;
(format 2) its per-document columns (prompt lengths, groups, advantages) are of shape (documents,), each
prompt within its document, each advantage finite.
A cache that passes is recorded in verified.json beside its files, with each file's (size, mtime_ns, ctime_ns,
inode), written atomically by the process that holds the build lock, or in this process's memory where the
folder is read-only. It is checked again as soon as any of these differs: ctime catches an edit whose mtime
was put back.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from gaccum_core.words import first_line
from gaccum_core.data.tokenising import COLUMNS, SPLITS, ids_dtype

META, VERIFIED = "meta.json", "verified.json"
CHUNK_BYTES = 1 << 22  # read at once while checking (4 MB)
Check = Callable[[Path, dict, int], "str | None"]  # (folder, meta, vocabulary size) → what is damaged, or None
Stamps = dict[str, list[int]]
_IN_MEMORY: dict[str, dict] = {}  # folder → its record, where verified.json cannot be written


@dataclass(frozen=True)
class Layout:
    """A format of the cache folder: its files, and the checks that they hold what meta.json says."""

    format: int
    files: tuple[str, ...]
    checks: tuple[Check, ...]


def damage(folder: Path, layout: Layout, vocab_size: int) -> str | None:
    """What is damaged in folder's cache, in one line ('train.bin: id 65,535 at 12 is not below …'); None when it
    holds a whole cache of layout for a vocabulary of vocab_size ids."""
    try:
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{META} is missing"
    except (OSError, ValueError) as exc:
        return f"{META} cannot be read ({first_line(exc)})"
    found = meta.get("format") if isinstance(meta, dict) else None
    if found != layout.format:
        return f"{META} says format {found!r}, where this cache is of format {layout.format}"
    for check in layout.checks:
        try:
            why = check(folder, meta, vocab_size)
        except FileNotFoundError as exc:
            return f"{Path(exc.filename or '?').name} is missing"
        except (OSError, ValueError) as exc:
            return f"a file cannot be read ({first_line(exc)})"
        if why is not None:
            return why
    return None


def stamps(folder: Path, layout: Layout) -> Stamps | None:
    """Each of layout's files' [size, mtime_ns, ctime_ns, inode]; None when one is missing."""
    try:
        infos = {name: os.stat(folder / name) for name in layout.files}
    except OSError:
        return None
    return {name: [i.st_size, i.st_mtime_ns, i.st_ctime_ns, i.st_ino] for name, i in infos.items()}


def is_verified(folder: Path, layout: Layout) -> bool:
    """Whether folder was verified with its files as they are now (verified.json, else this process's memory)."""
    now = stamps(folder, layout)
    if now is None:
        return False
    try:
        recorded = json.loads((folder / VERIFIED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        recorded = None
    wanted = {"format": layout.format, "files": now}
    return recorded == wanted or _IN_MEMORY.get(str(folder.absolute())) == wanted


def record(folder: Path, layout: Layout, verified: Stamps) -> None:
    """Remember folder as verified with its files at the stamps taken before the check: in verified.json, written
    atomically (by the holder of the build lock), else in memory where the folder cannot be written."""
    entry = {"format": layout.format, "files": verified}
    temporary = folder / f"{VERIFIED}.{os.getpid()}.tmp"
    try:
        temporary.write_text(json.dumps(entry), encoding="utf-8")
        os.replace(temporary, folder / VERIFIED)
    except OSError:  # a read-only folder (or disk): verified again by the next process
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        _IN_MEMORY[str(folder.absolute())] = entry


def _chunks(file: BinaryIO, dtype: np.dtype, count: int) -> Iterator[np.ndarray]:
    """The next count values of dtype in file, CHUNK_BYTES at a time, each chunk in one reused buffer."""
    with contextlib.suppress(OSError, AttributeError):  # a hint: the kernel reads further ahead
        os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
    buffer = np.empty(max(min(count, CHUNK_BYTES // dtype.itemsize), 1), dtype)
    done = 0
    while done < count:
        view = buffer[:min(len(buffer), count - done)]
        if file.readinto(view.view(np.uint8)) != view.nbytes:
            raise ValueError(f"{Path(file.name).name} ends early")
        yield view
        done += len(view)


def _check_meta(folder: Path, meta: dict, vocab_size: int) -> str | None:
    """meta.json's dtype is the one vocab_size needs, and its counts are counts."""
    need = ids_dtype(vocab_size).name
    if meta.get("dtype") != need:
        return f"{META} says dtype {meta.get('dtype')!r}, where a vocabulary of {vocab_size:,} ids is written as {need}"
    for key in ("tokens", "documents"):
        for split in SPLITS:
            value = meta[key].get(split) if isinstance(meta.get(key), dict) else None
            if type(value) is not int or value < 0:
                return f"{META}'s {key} of {split} is {value!r}, not a count"
    return None


def _check_sizes(folder: Path, meta: dict, vocab_size: int) -> str | None:
    """Each split's ids fill its file exactly."""
    width = np.dtype(meta["dtype"]).itemsize
    for split in SPLITS:
        size, count = (folder / f"{split}.bin").stat().st_size, meta["tokens"][split]
        if size != count * width:
            return (f"{split}.bin holds {size:,} bytes, where {META}'s {count:,} {meta['dtype']} ids fill "
                    f"{count * width:,}")
    return None


def _check_spans(folder: Path, meta: dict, vocab_size: int) -> str | None:
    """Each split's spans are int64 (documents, 2), each starting where or after the one before ends, inside the ids."""
    for split in SPLITS:
        name, documents, count = f"{split}_docs.npy", meta["documents"][split], meta["tokens"][split]
        with open(folder / name, "rb") as file:
            version = np.lib.format.read_magic(file)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(file)
            if dtype != np.dtype(np.int64) or shape != (documents, 2) or (fortran and documents > 1):
                return (f"{name} holds {dtype} {shape}{' in Fortran order' if fortran else ''}, where {META} says "
                        f"int64 ({documents:,}, 2)")
            previous_end, first = 0, 0
            for chunk in _chunks(file, dtype, 2 * documents):
                starts, ends = chunk[0::2], chunk[1::2]
                before = np.concatenate(([previous_end], ends[:-1]))
                bad = (starts < before) | (ends < starts) | (ends > count)
                if bad.any():
                    i = int(np.argmax(bad))
                    return (f"{name}: document {first + i:,} spans ({int(starts[i]):,}, {int(ends[i]):,}), where "
                            f"spans must follow one another inside the split's {count:,} ids")
                previous_end, first = int(ends[-1]), first + len(starts)
            if file.read(1):
                return f"{name} goes on past its {documents:,} spans"
    return None


def _check_ids(folder: Path, meta: dict, vocab_size: int) -> str | None:
    """Every id is below the vocabulary."""
    dtype = np.dtype(meta["dtype"])
    for split in SPLITS:
        position = 0
        with open(folder / f"{split}.bin", "rb") as file:
            for chunk in _chunks(file, dtype, meta["tokens"][split]):
                if chunk.max() >= vocab_size:
                    i = int(np.argmax(chunk >= vocab_size))
                    return (f"{split}.bin: id {int(chunk[i]):,} at {position + i:,} is not below the vocabulary's "
                            f"{vocab_size:,}")
                position += len(chunk)
    return None


def _check_columns(folder: Path, meta: dict, vocab_size: int) -> str | None:
    """Each split's COLUMNS are of their dtype and shape (documents,); prompts within their documents, groups from
    -1, advantages finite."""
    for split in SPLITS:
        documents = meta["documents"][split]
        for name, (kind, _) in COLUMNS.items():
            file = f"{split}_{name}.npy"
            try:
                values = np.load(folder / file, mmap_mode="r")
            except ValueError as exc:
                return f"{file} is not an .npy array ({first_line(exc)})"
            if values.dtype != kind or values.shape != (documents,):
                return f"{file} holds {values.dtype} {values.shape}, where {META} says {kind} ({documents:,},)"
        spans = np.load(folder / f"{split}_docs.npy", mmap_mode="r")
        for first in range(0, documents, CHUNK_BYTES // 8):
            why = _bad_values(folder, split, first, np.diff(spans[first:first + CHUNK_BYTES // 8], axis=1)[:, 0])
            if why is not None:
                return why
    return None


def _bad_values(folder: Path, split: str, first: int, lengths: np.ndarray) -> str | None:
    """What is wrong with the columns' values of the documents from first on (whose lengths are given), or None."""
    stop = first + len(lengths)
    prompts, groups, advantages = (np.asarray(np.load(folder / f"{split}_{name}.npy", mmap_mode="r")[first:stop])
                                   for name in ("prompts", "groups", "advantages"))
    for name, bad, what in (("prompts", (prompts < 0) | (prompts > lengths), "a prompt past its document's ids"),
                            ("groups", groups < -1, "a group index below -1"),
                            ("advantages", ~np.isfinite(advantages), "an advantage that is not finite")):
        if bad.any():
            i = int(np.argmax(bad))
            value = {"prompts": prompts, "groups": groups, "advantages": advantages}[name][i]
            return f"{split}_{name}.npy: document {first + i:,} has {what} ({value})"
    return None


# A later format extends the last one: Layout(n + 1, (*FORMAT_n.files, new files), (*FORMAT_n.checks, its checks)).
FORMAT_1 = Layout(1, (META, *(f"{split}{suffix}" for split in SPLITS for suffix in (".bin", "_docs.npy"))),
                  (_check_meta, _check_sizes, _check_spans, _check_ids))
# Format 2 (issue 43): each document's COLUMNS (prompt length, group, advantage), for sft and pg records.
FORMAT_2 = Layout(2, (*FORMAT_1.files, *(f"{split}_{name}.npy" for split in SPLITS for name in COLUMNS)),
                  (*FORMAT_1.checks, _check_columns))
LAYOUTS = {layout.format: layout for layout in (FORMAT_1, FORMAT_2)}

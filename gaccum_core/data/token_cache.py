"""The token cache: a corpus tokenised once into flat files of token ids that every later run memory-maps.

Per corpus and tokenizer, a folder <cache_dir>/<name>-<key>/ in nanoGPT's layout:
  train.bin, val.bin          each split's token ids, its documents one after another: uint16 when the
                              vocabulary has fewer than 65,536 ids, else uint32. Bytes put byte 0 after each
                              document; a model's tokenizer ends each with its EOS: packing joins documents
                              with an end-of-text token.
  train_docs.npy, val_docs.npy  int64 (documents, 2): where each document starts and ends in its split's ids,
                              an added byte 0 left out (so padded sequences are each document's own chunks).
  train_prompts.npy, val_prompts.npy  int64 (documents,): each record's prompt length in ids (sft, pg), else 0;
  *_groups.npy, *_advantages.npy  int64 and float64 (documents,): a pg record's group index and advantage
                              (else -1 and 0)
                              (format 2: a format-1 folder of the same corpus, which has another key, is
                              tokenised again, saying so, and removed).
  meta.json                   sources, tokenizer, dtype, counts, the build's seconds and MB/s.
  verified.json               each file's (size, mtime_ns, ctime_ns, inode) when the cache was last found whole
                              (cache_check.py: checked on opening, again whenever one of them differs; a damaged
                              cache is tokenised again, saying why).
key: sha256 of the corpus's identity (its files' resolved paths, sizes and modification times, the fields read)
and the tokenizer's. A build streams (split, text) documents in batches through the tokenizer's batched encode
into a temporary folder renamed at the end, under a lock (fcntl.flock) that concurrent runs and the ranks of a
job wait on, so nothing is tokenised twice; stopped, interrupted or killed, it leaves no folder a later run
would take for whole (tokenising.py turns documents into ids). speed.json in the cache folder keeps the last
build's MB/s per tokenizer, for estimates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

import numpy as np

from gaccum_core.config import ConfigError
from gaccum_core.data import cache_check
from gaccum_core.data.cache_check import META
from gaccum_core.data.tokenising import (COLUMNS, SPLITS, BuildProgress, Progress, SplitWriter, StopCheck, Tokens,
                                         TokenisingStopped, ids_dtype, ignore, never, tokenise)
from gaccum_core.runsdir import runs_dir

FORMAT = 2  # of the folder's files: a change makes new keys, and needs its Layout in cache_check.LAYOUTS
LAYOUT = cache_check.LAYOUTS[FORMAT]  # the files and checks of the format written
LOCK_POLL_S = 0.1
SPEED = "speed.json"
CACHE_ENV = "GACCUM_CACHE_DIR"


class DocumentSource(Protocol):
    """A corpus as the cache reads it (corpus.Corpus is one): its documents, and what identifies them."""

    name: str  # what progress names
    bytes_read: int  # read so far by documents()

    @property
    def total_bytes(self) -> int | None: ...

    def identity(self) -> dict: ...

    def documents(self) -> Iterator[tuple[str, str]]:
        """("train" or "val", text) of each document."""
        ...


@dataclass(frozen=True)
class TokenCache:
    """A tokenised corpus: per split, its ids (memory-mapped from folder, or in memory), document spans (n, 2) and
    per-document columns (tokenising.COLUMNS, each (n,))."""

    meta: dict
    splits: dict[str, tuple[np.ndarray, np.ndarray]]
    folder: Path | None = None
    columns: dict[str, dict[str, np.ndarray]] = dataclasses.field(default_factory=dict)  # split → COLUMNS



def default_cache_dir() -> Path:
    """GACCUM_CACHE_DIR, else token-cache beside the runs directory (GACCUM_RUNS_DIR, default ./runs)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path(runs_dir()).expanduser().absolute().parent / "token-cache"


def cache_key(identity: dict, tokens: Tokens, format: int = FORMAT) -> str:
    """sha256 of the corpus's identity, the tokenizer's and the format."""
    text = json.dumps({"corpus": identity, "tokenizer": tokens.identity, "format": format}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cache_folder(root: Path, name: str, identity: dict, tokens: Tokens, format: int = FORMAT) -> Path:
    """The folder of this corpus (its name, made readable; its identity) and tokenizer, in this format."""
    readable = re.sub(r"[^\w.-]+", "_", name)[:40] or "corpus"
    return root / f"{readable}-{cache_key(identity, tokens, format)[:24]}"


def open_cache(root: Path, source: DocumentSource, tokens: Tokens, progress: Progress | None = None,
               should_stop: StopCheck | None = None) -> TokenCache:
    """The cache of source under root, verified (cache_check) or built first when there is none or it is damaged
    (or waited for, while another process builds or verifies it). TokenisingStopped when should_stop asks;
    KeyboardInterrupt and any error leave no cache."""
    identity = source.identity()
    folder = cache_folder(root, source.name, identity, tokens)
    cache = read_cache(folder)
    if cache is not None:
        return cache
    progress, should_stop = progress or ignore, should_stop or never
    root.mkdir(parents=True, exist_ok=True)
    waiting = BuildProgress(source.name, 0, source.total_bytes, 0.0, 0.0, waiting=True)
    with _build_lock(root / f"{folder.name}.lock", should_stop, lambda: progress(waiting)) as writable:
        cache = read_cache(folder)  # verified, or built, by the process this one waited for
        if cache is None:
            _verify_or_build(folder, source, identity, tokens, progress, should_stop, writable)
            cache = read_cache(folder)
    if cache is None:
        raise OSError(f"the token cache {folder} was built but cannot be read back")
    return cache


def _verify_or_build(folder: Path, source: DocumentSource, identity: dict, tokens: Tokens, progress: Progress,
                     should_stop: StopCheck, writable: bool) -> None:
    """Record folder verified when it holds a whole cache, else build it (saying why when it was damaged); called
    under the lock, or where the root is read-only (writable False), where a damaged cache is refused."""
    stamped = cache_check.stamps(folder, LAYOUT)
    why = cache_check.damage(folder, LAYOUT, tokens.vocab_size) if folder.exists() else None
    if folder.exists() and why is None and stamped is not None:
        cache_check.record(folder, LAYOUT, stamped)
        return
    if not writable:
        state = f"is damaged ({why})" if folder.exists() else "is not built"
        raise ConfigError("cache_dir", str(folder.parent), f"a folder the token cache can be written to: the cache of "
                          f"{source.name} there {state}, and the folder is read-only")
    older = {f: cache_folder(folder.parent, source.name, identity, tokens, f) for f in cache_check.LAYOUTS
             if f < FORMAT}
    older = {f: path for f, path in older.items() if path.is_dir()}  # this corpus's cache as an older gaccum wrote it
    if why is not None or older:
        reason = f"damaged ({why})" if why is not None else f"of format {max(older)}, where this gaccum reads {FORMAT}"
        progress = _saying_why(progress, reason)
        progress(BuildProgress(source.name, 0, source.total_bytes, 0.0, 0.0))  # said before the first batch
    _build(folder, source, identity, tokens, progress, should_stop)
    for path in older.values():  # replaced by the folder just built
        shutil.rmtree(path, ignore_errors=True)
    stamped, why = cache_check.stamps(folder, LAYOUT), cache_check.damage(folder, LAYOUT, tokens.vocab_size)
    if why is not None or stamped is None:
        raise OSError(f"the token cache {folder} was built but is not whole: {why}")
    cache_check.record(folder, LAYOUT, stamped)


def _saying_why(progress: Progress, why: str) -> Progress:
    """progress, each BuildProgress saying why the corpus is tokenised again ('damaged (…)', 'of format 1, …')."""
    return lambda where: progress(dataclasses.replace(where, damaged=why))


def read_cache(folder: Path) -> TokenCache | None:
    """The cache in folder, memory-mapped, when it was verified with its files as they are now (cache_check);
    None otherwise: there is none, it was never verified, or a file changed since."""
    if not cache_check.is_verified(folder, LAYOUT):
        return None
    try:
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
        dtype = np.dtype(meta["dtype"])
        splits, columns = {}, {}
        for split in SPLITS:
            count = meta["tokens"][split]
            ids = np.memmap(folder / f"{split}.bin", dtype=dtype, mode="r") if count else np.zeros(0, dtype)
            splits[split] = (ids, np.load(folder / f"{split}_docs.npy", mmap_mode="r"))
            columns[split] = {name: np.load(folder / f"{split}_{name}.npy", mmap_mode="r") for name in COLUMNS}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return TokenCache(meta, splits, folder, columns)


def tokenise_in_memory(documents: Iterable[tuple[str, str]], tokens: Tokens) -> TokenCache:
    """The same cache, in memory (no disk): for a small bundled corpus."""
    files = {split: (io.BytesIO(), io.BytesIO(), {name: io.BytesIO() for name in COLUMNS}) for split in SPLITS}
    dtype = ids_dtype(tokens.vocab_size)
    writers = {split: SplitWriter(*files[split], dtype) for split in SPLITS}
    tokenise(documents, tokens, writers, lambda: 0)
    splits = {split: (np.frombuffer(ids.getvalue(), dtype=dtype),
                      np.frombuffer(spans.getvalue(), dtype=np.int64).reshape(-1, 2))
              for split, (ids, spans, _) in files.items()}
    columns = {split: {name: np.frombuffer(files[split][2][name].getvalue(), dtype=kind)
                       for name, (kind, _) in COLUMNS.items()} for split in SPLITS}
    meta = {"dtype": dtype.name, "tokens": {s: w.tokens for s, w in writers.items()},
            "documents": {s: w.documents for s, w in writers.items()}}
    return TokenCache(meta, splits, None, columns)


def _build(folder: Path, source: DocumentSource, identity: dict, tokens: Tokens, progress: Progress,
           should_stop: StopCheck) -> None:
    """Tokenise source into a temporary folder beside folder, then rename it folder (called under the lock)."""
    _remove_killed_builds(folder.parent, folder.name)
    temporary = folder.parent / f"{folder.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    temporary.mkdir()
    try:
        seconds, writers = _write(temporary, source, tokens, progress, should_stop)
        if source.identity() != identity:
            raise ValueError(f"{source.name} changed while it was tokenised: nothing was cached, start again")
        total = source.bytes_read
        meta = {"format": FORMAT, "source": source.name, "identity": identity, "tokenizer": tokens.identity,
                "dtype": ids_dtype(tokens.vocab_size).name, "bytes": total,
                "tokens": {s: w.tokens for s, w in writers.items()},
                "documents": {s: w.documents for s, w in writers.items()},
                "seconds": round(seconds, 3), "mb_per_s": round(total / 2**20 / max(seconds, 1e-9), 3)}
        (temporary / META).write_text(json.dumps(meta, indent=1), encoding="utf-8")
        if folder.exists():  # a damaged cache
            shutil.rmtree(folder)
        os.rename(temporary, folder)
    except BaseException:  # a stop, Ctrl-C, a full disk: no folder left that looks whole
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    remember_speed(folder.parent, tokens, meta["mb_per_s"])


def _write(temporary: Path, source: DocumentSource, tokens: Tokens, progress: Progress,
           should_stop: StopCheck) -> tuple[float, dict[str, SplitWriter]]:
    """The split files in temporary: seconds taken and the writers (their counts)."""
    dtype, start = ids_dtype(tokens.vocab_size), time.perf_counter()
    total = source.total_bytes

    def report(done: int, seconds: float) -> None:
        written = sum(w.tokens for w in writers.values())
        progress(BuildProgress(source.name, done, total, written / max(seconds, 1e-9), seconds))

    with contextlib.ExitStack() as files:
        def opening(name: str) -> BinaryIO:
            return files.enter_context(open(temporary / name, "wb"))

        opened = {s: (opening(f"{s}.bin"), opening(f"{s}.raw"), {n: opening(f"{s}.{n}.raw") for n in COLUMNS})
                  for s in SPLITS}
        writers = {s: SplitWriter(*opened[s], dtype) for s in SPLITS}
        tokenise(source.documents(), tokens, writers, lambda: source.bytes_read, report, should_stop)
        for ids, spans, columns in opened.values():
            for file in (ids, spans, *columns.values()):
                file.flush()
            os.fsync(ids.fileno())  # on disk before the rename makes it the cache
    for split, writer in writers.items():
        _to_npy(temporary / f"{split}.raw", temporary / f"{split}_docs.npy", np.dtype(np.int64), (writer.documents, 2))
        for name, (kind, _) in COLUMNS.items():
            _to_npy(temporary / f"{split}.{name}.raw", temporary / f"{split}_{name}.npy", kind, (writer.documents,))
    return time.perf_counter() - start, writers


def _to_npy(raw: Path, npy: Path, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    """The raw values of dtype as an .npy file of this shape, copied a block at a time."""
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    with open(npy, "wb") as out, open(raw, "rb") as data:
        np.lib.format.write_array_header_1_0(out, header)
        shutil.copyfileobj(data, out, 1 << 22)
        out.flush()
        os.fsync(out.fileno())
    raw.unlink()


def _remove_killed_builds(root: Path, mine: str) -> None:
    """Remove the temporary folders killed builds left in root: this key's (its lock is held here), and another
    key's when nobody holds its lock (a build in progress does)."""
    for stale in root.glob("*.tmp-*"):
        name = stale.name.split(".tmp-")[0]
        if name == mine:
            shutil.rmtree(stale, ignore_errors=True)
            continue
        with contextlib.suppress(OSError), _held(root / f"{name}.lock") as held:
            if held:
                shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def _held(path: Path) -> Iterator[bool]:
    """Whether path's flock could be taken at once (held meanwhile); False when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


@contextlib.contextmanager
def _build_lock(path: Path, should_stop: StopCheck, waiting: Callable[[], None]) -> Iterator[bool]:
    """_locked, yielding True; False, holding nothing, where the folder cannot hold the lock file (read-only)."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644))
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        yield False
        return
    with _locked(path, should_stop, waiting):
        yield True


@contextlib.contextmanager
def _locked(path: Path, should_stop: StopCheck, waiting: Callable[[], None]) -> Iterator[None]:
    """Hold an exclusive flock on path (released when this process ends, however it ends); while another
    holds it, wait, telling waiting() once and asking should_stop."""
    told = False
    while True:
        with _held(path) as held:
            if held:
                yield
                return
        if should_stop():
            raise TokenisingStopped("stopped while waiting for the corpus to be tokenised")
        if not told:
            waiting()
            told = True
        time.sleep(LOCK_POLL_S)


def remember_speed(root: Path, tokens: Tokens, mb_per_s: float) -> None:
    """Keep the last build's MB/s for this kind of tokenizer in root/speed.json (for estimates)."""
    speeds = measured_speeds(root)
    speeds[_speed_key(tokens)] = mb_per_s
    temporary = root / f"{SPEED}.{os.getpid()}.tmp"
    try:
        temporary.write_text(json.dumps(speeds, indent=1), encoding="utf-8")
        os.replace(temporary, root / SPEED)
    except OSError:
        temporary.unlink(missing_ok=True)  # only an estimate is lost


def measured_speeds(root: Path) -> dict[str, float]:
    """MB/s of the last build per tokenizer, {} when none was measured."""
    try:
        speeds = json.loads((root / SPEED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in speeds.items() if isinstance(v, (int, float)) and v > 0} \
        if isinstance(speeds, dict) else {}


def _speed_key(tokens: Tokens) -> str:
    return tokens.name if tokens.identity["kind"] != "bytes" else "bytes"


def estimate_seconds(root: Path, tokens: Tokens, total_bytes: int) -> float | None:
    """Seconds to tokenise total_bytes at the last speed measured for this tokenizer; None when never measured."""
    speed = measured_speeds(root).get(_speed_key(tokens))
    return None if speed is None else total_bytes / 2**20 / speed

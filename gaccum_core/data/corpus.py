"""What a text data set's text_file names, read one document at a time: a file, a folder of shards or a glob.

A .txt shard's documents are its paragraphs (split on blank lines), read in blocks, the paragraph a block cuts
carried over to the next; a .jsonl shard's are its lines' text_field, read line by line. Nothing is read whole:
memory holds a block and the paragraph it ends in, and a document longer than text_file_max_mb is refused.
The shards are read in sorted order as one stream of documents, every tenth (by position, from the first) held
out for validation. FIFOs, devices and the kernel's own files are refused before anything is read.
"""

from __future__ import annotations

import codecs
import glob
import json
import os
import re
import stat
from collections.abc import Iterator
from typing import BinaryIO

from gaccum_core.config import ConfigError

SUFFIXES = (".txt", ".jsonl")
BLOCK = 1 << 22  # bytes read at once from a .txt shard (at most text_file_max_mb)
VALIDATION_EVERY = 10  # document i is held out for validation when i % VALIDATION_EVERY == 0
PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_NOT_SPACE = re.compile(r"\S")
_GLOB = re.compile(r"[*?[]")
_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
# The kernel's own files look regular (of size 0) but are made as they are read, or fail (/proc/self/mem).
# /dev needs no entry: its devices are refused by kind, and /dev/shm holds real files.
_KERNEL_ROOTS = ("/proc", "/sys")


class Corpus:
    """The documents of the files text_file names, streamed: (split, text) pairs, and what identifies them."""

    def __init__(self, text_file: str, field: str = "text", max_mb: int = 256) -> None:
        """ConfigError naming text_file when it names no readable regular file of text (nothing is read yet)."""
        self.text_file, self.field, self.limit = text_file, field, max_mb << 20
        self.paths = shard_paths(text_file)
        self.kind = "directory" if os.path.isdir(text_file) else "glob" if self.paths != [text_file] else ""
        self.bytes_read = 0  # of every shard, as documents are read

    @property
    def name(self) -> str:
        """What progress names: the file's, folder's or glob's last part."""
        return os.path.basename(self.text_file.rstrip("/")) or self.text_file

    @property
    def total_bytes(self) -> int:
        """The shards' sizes, summed."""
        return sum(os.stat(path).st_size for path in self.paths)

    def identity(self) -> dict:
        """The shards' resolved paths, sizes and modification times, and the field read: a token cache's key (not
        ctime, which a chmod or a backup's restore changes: the cache's verification stamps hold it)."""
        files = []
        for path in self.paths:
            info = os.stat(path)
            files.append([os.path.realpath(path), info.st_size, info.st_mtime_ns])
        return {"files": files, "text_field": self.field}

    def documents(self) -> Iterator[tuple[str, str]]:
        """("val" or "train", text) of every document in reading order: document i is held out for validation
        when i % VALIDATION_EVERY == 0. ConfigError (naming text_file or text_field) when a shard is unusable,
        or at the end when there are fewer than 2 documents."""
        count, self.bytes_read = 0, 0
        for path in self.paths:
            file = _open(self.text_file, path)
            with file:
                for text in (self._lines if path.lower().endswith(".jsonl") else self._paragraphs)(file, path):
                    yield ("val" if count % VALIDATION_EVERY == 0 else "train"), text
                    count += 1
        if count < 2:
            jsonl = sum(p.lower().endswith(".jsonl") for p in self.paths)
            unit = ("lines with text" if jsonl == len(self.paths) else "paragraphs separated by a blank line"
                    if not jsonl else "documents (paragraphs, or .jsonl lines with text)")
            holder = "a file" if not self.kind else f"a {self.kind} whose files hold"
            raise ConfigError("text_file", self.text_file, f"{holder} with at least 2 {unit}, one for training and "
                              f"one for validation: it has {count}")

    def _refuse(self, path: str, allowed: str, field: str = "text_file") -> ConfigError:
        value = self.text_file if field == "text_file" else self.field
        return ConfigError(field, value, allowed + _where(self.text_file, path))

    def _read(self, file: BinaryIO, size: int, path: str, line: bool = False) -> bytes:
        try:
            data = file.readline(size) if line else file.read(size)
        except OSError as exc:  # a failing disk, a network file system gone
            raise self._refuse(path, f"a readable file: it cannot be read ({exc.strerror})") from None
        self.bytes_read += len(data)
        return data

    def _paragraphs(self, file: BinaryIO, path: str) -> Iterator[str]:
        """The shard's paragraphs, stripped, of at least 2 characters: re.split(PARAGRAPH_BREAK) of the whole
        text, read a block at a time (a break is cut at only once text that is not space follows it)."""
        decoder, pending, done = codecs.getincrementaldecoder("utf-8")(), "", 0
        while True:
            data = self._read(file, min(BLOCK, self.limit), path)
            held = len(decoder.getstate()[0])  # bytes of a character the last block cut in two
            try:
                pending += decoder.decode(data, final=not data)
            except UnicodeDecodeError as exc:
                raise self._refuse(path, f"UTF-8 text: byte {done - held + exc.start} is not UTF-8") from None
            done += len(data)
            if not data:
                break
            cut = _last_break(pending)
            if cut is not None:
                yield from self._kept(PARAGRAPH_BREAK.split(pending[:cut.start()]), path, done)
                pending = pending[cut.end():]
            self._check_size(len(pending), path, done)
        yield from self._kept(PARAGRAPH_BREAK.split(pending), path, done)

    def _kept(self, pieces: list[str], path: str, done: int) -> Iterator[str]:
        """The pieces stripped, those of at least 2 characters; none over the limit."""
        for piece in pieces:
            self._check_size(len(piece), path, done)
            document = piece.strip()
            if len(document) >= 2:
                yield document

    def _check_size(self, characters: int, path: str, done: int) -> None:
        if characters > self.limit:
            raise self._refuse(path, f"paragraphs of at most {self.limit >> 20} MB each: one goes on past that "
                               f"before byte {done:,} (raise text_file_max_mb, --text-file-max-mb, to read it)")

    def _lines(self, file: BinaryIO, path: str) -> Iterator[str]:
        """Each non-blank line's document (_document: its text_field, stripped, of at least 2 characters)."""
        number = done = 0
        while line := self._read(file, self.limit + 1, path, line=True):
            number += 1
            if len(line) > self.limit and not line.endswith(b"\n"):
                raise self._refuse(path, f"lines of at most {self.limit >> 20} MB each: line {number} is longer "
                                   "(raise text_file_max_mb, --text-file-max-mb, to read it)")
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise self._refuse(path, f"UTF-8 text: byte {done + exc.start} is not UTF-8") from None
            done += len(line)
            if text.strip() and (document := self._document(text, number, path)) is not None:
                yield document

    def _document(self, line: str, number: int, path: str) -> str | None:
        """The line's text_field, stripped, when it has at least 2 characters."""
        document = self._field(line, number, path).strip()
        return document if len(document) >= 2 else None

    def _field(self, line: str, number: int, path: str) -> str:
        """The line's text_field: ConfigError naming the line when it is not a JSON object with one."""
        return field_of(self._parsed(line, number, path), "text_field", self.field, number, path)

    def _parsed(self, line: str, number: int, path: str) -> object:
        """The line's JSON value: ConfigError naming text_file and the line when it is not JSON."""
        try:
            return json.loads(line)
        except json.JSONDecodeError as exc:
            raise self._refuse(path, f"JSON Lines, one JSON object a line: line {number} is not JSON ({exc.msg} at "
                               f"column {exc.colno})") from None


def field_of(record: object, setting: str, field: str, number: int, path: str) -> str:
    """record[field], a string: ConfigError naming the setting, the field and the line otherwise."""
    if not isinstance(record, dict) or not isinstance(record.get(field), str):
        has = (f"its fields are {', '.join(map(repr, list(record)[:8]))}" if isinstance(record, dict)
               else f"it is a JSON {type(record).__name__}")
        flag = "--" + setting.replace("_", "-")
        raise ConfigError(setting, field, f"a string field of every line of {path}: line {number} has no string "
                          f"{field!r} ({has}; set {setting}, {flag}, to the one holding it)")
    return record[field]


def _last_break(text: str) -> re.Match | None:
    """The last paragraph break in text that text not space follows (one at the end might go on in the
    next block); None when there is none."""
    last = previous = None
    for match in PARAGRAPH_BREAK.finditer(text):
        previous, last = last, match
    if last is not None and not _NOT_SPACE.search(text, last.end()):
        return previous  # only the last break can be followed by space alone
    return last


def shard_paths(text_file: str) -> list[str]:
    """The files text_file names, in reading order: itself, a folder's .txt and .jsonl files, or a glob's
    matches, sorted; each a readable regular file outside /proc and /sys (else ConfigError naming text_file)."""
    _refuse_kernel_file(text_file, text_file)
    if os.path.isdir(text_file):
        names = sorted(n for n in os.listdir(text_file) if n.lower().endswith(SUFFIXES) and not n.startswith("."))
        if not names:
            raise ConfigError("text_file", text_file, "a file, or a directory of .txt or .jsonl files (its shards): "
                              "this is a directory with none")
        paths = [os.path.join(text_file, name) for name in names]
    elif not os.path.lexists(text_file) and _GLOB.search(text_file):
        paths = sorted(p for p in glob.glob(text_file) if not os.path.isdir(p))
        if not paths:
            raise ConfigError("text_file", text_file, "a file, a directory or a glob of .txt or .jsonl files: this "
                              "glob matches no file")
    else:
        paths = [text_file]
    for path in paths:
        where = _where(text_file, path)
        _refuse_kernel_file(text_file, path, where)
        try:
            _check_kind(text_file, os.stat(path), where)
        except OSError as exc:
            raise _open_error(text_file, exc, where) from None
    return paths


def _where(text_file: str, path: str) -> str:
    """What a refusal adds when text_file names several files: which one."""
    if path == text_file:
        return ""
    return f" (in {path}: text_file is a {'directory' if os.path.isdir(text_file) else 'glob'} of shards)"


def _refuse_kernel_file(text_file: str, path: str, where: str = "") -> None:
    """ConfigError naming text_file for a path that is, or leads to, a file under /proc or /sys."""
    try:
        real = os.path.realpath(path)
    except ValueError:  # a NUL byte, which no path holds
        raise ConfigError("text_file", text_file, "a path without NUL bytes") from None
    root = next((r for r in _KERNEL_ROOTS if real == r or real.startswith(r + "/")), None)
    if root is not None:
        raise ConfigError("text_file", text_file, f"a file of text on disk: {real} is under {root}, the kernel's own "
                          f"files, never training text{where}")


def _check_kind(text_file: str, info: os.stat_result, where: str) -> None:
    """ConfigError naming text_file unless info is a regular file's."""
    if stat.S_ISREG(info.st_mode):
        return
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError("text_file", text_file, f"a file: this is a directory{where}")
    kind = next((words for test, words in _KINDS if test(info.st_mode)), "not a regular file")
    raise ConfigError("text_file", text_file, f"a regular file: this is {kind}{where}")


def _open_error(text_file: str, exc: OSError, where: str) -> ConfigError:
    if isinstance(exc, FileNotFoundError):
        return ConfigError("text_file", text_file, f"an existing file: there is no such file{where}")
    if isinstance(exc, PermissionError):
        return ConfigError("text_file", text_file, f"a readable file: permission denied{where}")
    return ConfigError("text_file", text_file, f"a readable file: {exc.strerror}{where}")


def _open(text_file: str, path: str) -> BinaryIO:
    """The shard open for reading, checked again on the open file: a FIFO's open does not block (O_NONBLOCK),
    and one put in a checked file's place is refused before any read."""
    where = _where(text_file, path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _open_error(text_file, exc, where) from None
    try:
        _check_kind(text_file, os.fstat(fd), where)
    except ConfigError:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")

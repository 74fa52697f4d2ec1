"""The runs directory's index: each run's row of the runs table (settings, state, final figures) kept in an
SQLite database (runs/.index.sqlite; on a network filesystem, this host's own file in a local cache folder:
index_place), so that listing thousands of runs reads the files of only those that changed, also in a server
just restarted.

The run folders stay the source of truth. A row is stored with the stamp of the files it was read from
(inode, mtime_ns, ctime_ns and size of each, taken before reading them) and read again from the folder
whenever a stamp differs: an atomic replace is a new inode, an appended CSV row a new size, an edit in place
whose mtime was put back a new ctime (which no one can set). A run with no row is read
and added; the row of a folder that is gone is dropped. Several processes (servers, command lines) list and
write at once: WAL mode, a busy timeout, and each batch of whole rows one transaction, so a reader never sees
half a row. Being a cache, a damaged index file is replaced by an empty one, and where it cannot be written
(a read-only runs directory, a full disk) the runs are listed from their folders as before.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, TypeVar

from gaccum_core.runs.index_place import is_network, this_host_index

# The files a row is read from: a change to any of them makes the row stale.
STAMPED = ("status.json", "config.json", "metrics.csv", "eval.csv", "tags.json", "checkpoint.pt")
BATCH = 100  # runs read from their folders between two commits (and two progress reports)
BUSY_TIMEOUT_S = 5.0  # a write waits this long for another process's (each holds the lock for one batch)
_QUERY_CHUNK = 500  # run ids per SELECT ... IN (...)

Row = dict[str, Any]
Progress = Callable[[int, int], None]  # (runs read so far, runs to read)
_T = TypeVar("_T")

# What this process last saw, per runs directory: run id -> (stamp, row). A page polled every second then
# asks SQLite only about the runs whose files changed.
_SEEN: dict[tuple[Path, str], dict[str, tuple[str, Row]]] = {}
_SEEN_LOCK = threading.Lock()


def stamp(run_dir: str | Path) -> str:
    """The versions of the files a run's row is read from: inode, mtime_ns, ctime_ns and size of each, '-' when
    absent."""
    parts, base = [], os.fspath(run_dir) + os.sep
    for name in STAMPED:
        try:
            st = os.stat(base + name)
        except OSError:  # absent, or the folder itself is gone
            parts.append("-")
        else:
            parts.append(f"{st.st_ino}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_size}")
    return " ".join(parts)


def code_digest(*modules: str) -> str:
    """A digest of these modules' source files: the version of the code that computes a row, so that rows
    computed by other code (before an upgrade) are read again."""
    digest = hashlib.sha256()
    for path in sorted({getattr(sys.modules[name], "__file__", None) or name for name in modules}):
        try:
            digest.update(Path(path).read_bytes())
        except OSError:  # no source file: its name alone
            digest.update(path.encode())
    return digest.hexdigest()[:16]


def _encode(row: Row) -> str:
    return json.dumps(row, default=_plain)


def _plain(value: Any) -> Any:
    """A numpy number (a pandas cell) as the Python number it holds; a tuple is written as a list by json itself."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not stored in the runs index")


def _encoded(batch: list[tuple[str, str, Row]]) -> list[tuple[str, str, str]]:
    """(run id, stamp, row as JSON) of each row JSON can hold; another is kept in this process only, and read
    from its folder again after a restart."""
    encoded = []
    for run_id, run_stamp, row in batch:
        try:
            encoded.append((run_id, run_stamp, _encode(row)))
        except (TypeError, ValueError):
            continue
    return encoded


def _decode(texts: Sequence[str]) -> list[Row]:
    """Many rows with one call of the JSON parser (ten times faster than one call per row)."""
    return json.loads("[" + ",".join(texts) + "]") if texts else []


class RunIndex:
    """The index of one runs directory, for rows computed by the code of one version (code_digest): each
    version keeps its rows in a table of its own, and the first listing by a new version drops the others'."""

    def __init__(self, root: str | Path, version: str) -> None:
        self.root, self.version = Path(root), version
        self.path, fstype = this_host_index(self.root)
        self.in_cache = is_network(fstype)  # this host's file in a cache folder, not beside the runs
        self.table = f"runs_{version}"

    def rows(self, run_ids: Sequence[str], read: Callable[[str], Row], progress: Progress | None = None,
             every: bool = True) -> list[Row]:
        """Each run's row, in run_ids' order: as indexed where its files are unchanged since, else read(run_id)
        from its folder and stored. progress(done, total) follows the runs read, a batch at a time. every: the
        run ids are every run on disk (a listing), and the rows of any other run are dropped. The rows are this
        process's own copies, shared by every listing: copy one to change it."""
        root = os.fspath(self.root)
        stamps = {run_id: stamp(os.path.join(root, run_id)) for run_id in run_ids}  # no Path: 10,000 of them
        with _SEEN_LOCK:
            seen = dict(_SEEN.get(self._key(), {}))
        unseen = [r for r in run_ids if r not in seen or seen[r][0] != stamps[r]]
        gone = [r for r in seen if r not in stamps] if every else []
        if unseen or gone:
            # The first listing in this process reads every stored row, and so finds those of runs deleted since.
            everything = every and (not seen or len(unseen) > _QUERY_CHUNK)
            stored = self._stored(None if everything else unseen)
            gone += [r for r in stored if r not in stamps] if everything else []
            fresh = [r for r in unseen if r in stored and stored[r][0] == stamps[r]]
            seen.update(zip(fresh, zip((stamps[r] for r in fresh), _decode([stored[r][1] for r in fresh]))))
            kept = set(fresh)
            seen.update(self._read([r for r in unseen if r not in kept], stamps, read, progress))
            for run_id in gone:
                seen.pop(run_id, None)
            self._forget_stored(gone)
        with _SEEN_LOCK:
            _SEEN[self._key()] = seen
        return [seen[run_id][1] for run_id in run_ids]

    def forget(self, run_ids: Iterable[str]) -> None:
        """Drop the rows of deleted runs (a listing drops them too: this is for a process that deleted them)."""
        run_ids = list(run_ids)
        with _SEEN_LOCK:
            for run_id in run_ids:
                _SEEN.get(self._key(), {}).pop(run_id, None)
        self._forget_stored(run_ids)

    def _key(self) -> tuple[Path, str]:
        return self.root.resolve(), self.version

    def _read(self, stale: list[str], stamps: dict[str, str], read: Callable[[str], Row],
              progress: Progress | None) -> dict[str, tuple[str, Row]]:
        """Read the stale runs from their folders, storing them a batch per transaction."""
        found: dict[str, tuple[str, Row]] = {}
        if progress is not None and stale:
            progress(0, len(stale))
        for start in range(0, len(stale), BATCH):
            batch = [(run_id, stamps[run_id], read(run_id)) for run_id in stale[start:start + BATCH]]
            found.update((run_id, (run_stamp, row)) for run_id, run_stamp, row in batch)
            encoded = _encoded(batch)
            self._use(lambda db: db.executemany(
                f"INSERT INTO {self.table} (run_id, stamp, data) VALUES (?, ?, ?) ON CONFLICT (run_id) DO UPDATE "
                "SET stamp = excluded.stamp, data = excluded.data", encoded), write=True)
            if progress is not None:
                progress(len(found), len(stale))
        return found

    def _stored(self, wanted: list[str] | None) -> dict[str, tuple[str, str]]:
        """The stored (stamp, row text) of the wanted runs; of every run stored when wanted is None."""
        def select(db: sqlite3.Connection) -> dict[str, tuple[str, str]]:
            if wanted is None:
                return {r: (s, text) for r, s, text in db.execute(f"SELECT run_id, stamp, data FROM {self.table}")}
            found: dict[str, tuple[str, str]] = {}
            for start in range(0, len(wanted), _QUERY_CHUNK):
                chunk = wanted[start:start + _QUERY_CHUNK]
                found.update((r, (s, text)) for r, s, text in db.execute(
                    f"SELECT run_id, stamp, data FROM {self.table} WHERE run_id IN ({','.join('?' * len(chunk))})", chunk))
            return found

        return self._use(select, write=False) or {}

    def _forget_stored(self, run_ids: list[str]) -> None:
        if run_ids and self.path.exists():
            self._use(lambda db: db.executemany(f"DELETE FROM {self.table} WHERE run_id = ?", [(r,) for r in run_ids]),
                      write=True)

    def _use(self, work: Callable[[sqlite3.Connection], _T], write: bool) -> _T | None:
        """work(connection) in one transaction; None when the index cannot be used now. A damaged file is
        replaced by an empty index, then tried once more."""
        for attempt in range(2):
            try:
                with closing(self._connect(write)) as db, db:
                    return work(db)
            except sqlite3.OperationalError:  # read-only, locked past the timeout, full disk: the folders serve
                return None
            except sqlite3.DatabaseError:  # not a database, or a damaged page
                if attempt == 0 and not self._replace_damaged():
                    return None
        return None

    def _connect(self, write: bool) -> sqlite3.Connection:
        if not write and not self.path.exists():
            raise sqlite3.OperationalError("no index yet")
        if write and self.in_cache:  # the cache folder is made at the first write
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise sqlite3.OperationalError(str(exc)) from exc
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                db.execute("PRAGMA journal_mode = WAL")  # readers never wait for a writer, nor it for them
            db.execute("PRAGMA synchronous = NORMAL")  # a cache: a power cut may lose the last rows, never the file
            tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            if self.table not in tables:
                self._create_table(db, [t for t in tables if t.startswith("runs_")])
        except BaseException:
            db.close()
            raise
        return db

    def _create_table(self, db: sqlite3.Connection, others: list[str]) -> None:
        """This version's table, in place of other versions' (a server upgraded: their rows are of other code)."""
        with db:
            for other in others:
                db.execute(f'DROP TABLE IF EXISTS "{other}"')
            db.execute(f"CREATE TABLE IF NOT EXISTS {self.table} (run_id TEXT PRIMARY KEY, stamp TEXT NOT NULL, "
                       "data TEXT NOT NULL)")

    def _replace_damaged(self) -> bool:
        """Replace a damaged index file with an empty one, under a lock so that two processes that found it
        damaged replace it once; whether the index can be used now."""
        try:
            with open(f"{self.path}.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not self._damaged():
                    return True  # another process replaced it meanwhile
                for suffix in ("", "-wal", "-shm", "-journal"):
                    Path(f"{self.path}{suffix}").unlink(missing_ok=True)
                with closing(self._connect(write=True)):
                    return True
        except (OSError, sqlite3.DatabaseError):
            return False

    def _damaged(self) -> bool:
        try:
            with closing(self._connect(write=True)) as db:
                return db.execute("PRAGMA quick_check").fetchone()[0] != "ok"
        except sqlite3.OperationalError:
            return False
        except sqlite3.DatabaseError:
            return True

"""Where a runs directory's index is kept on this host: beside the runs (runs/.index.sqlite) on a local
filesystem; on a network filesystem (NFS, SMB, Lustre, GPFS, sshfs, ...), whose runs directory several hosts
share and whose locking SQLite's WAL mode cannot trust (it needs every process on one host), in a local cache
folder of this host's, keyed by the runs directory's path. The run folders stay the only shared truth.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import socket
import tempfile
from pathlib import Path

INDEX_FILE = ".index.sqlite"
MOUNTINFO = Path("/proc/self/mountinfo")
# Filesystem types (a FUSE one by its helper: fuse.sshfs is sshfs) that several hosts share, by their name in
# /proc/self/mountinfo.
NETWORK_FS = frozenset({
    "nfs", "nfs4", "cifs", "smb", "smb2", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "cephfs", "glusterfs",
    "sshfs", "9p", "afs", "openafs", "panfs", "wekafs", "orangefs", "pvfs2", "ocfs2", "gfs2", "s3fs", "gcsfuse",
    "rclone", "juicefs", "davfs", "davfs2", "moosefs", "mfs", "lizardfs", "cvmfs",
})
_OCTAL = re.compile(r"\\([0-7]{3})")  # mountinfo writes a space in a mount point as \040


def is_network(fstype: str) -> bool:
    """Whether a filesystem of this type (as /proc/self/mountinfo names it) may be shared by several hosts."""
    name = fstype.lower().removeprefix("fuse.")
    return name in NETWORK_FS or name.startswith(("nfs", "smb", "cifs"))


def fs_type(path: Path, mountinfo: str | None = None) -> str:
    """The type of the filesystem holding the absolute path (the longest mount point above it in
    /proc/self/mountinfo, or in the text given); '' where that cannot be read (not Linux)."""
    try:
        text = MOUNTINFO.read_text(encoding="utf-8", errors="replace") if mountinfo is None else mountinfo
    except OSError:
        return ""
    target, best, kind = os.fspath(path), "", ""
    for line in text.splitlines():
        fields, _, after = line.partition(" - ")
        fields, after = fields.split(), after.split()
        if len(fields) < 5 or not after:
            continue
        point = _OCTAL.sub(lambda m: chr(int(m[1], 8)), fields[4])
        inside = point == "/" or target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):  # a later mount on the same point hides the earlier one
            best, kind = point, after[0]
    return kind


def index_file(root: Path, fstype: str, host: str, cache: Path) -> Path:
    """Where the index of the runs directory root (resolved) is kept: root/.index.sqlite on a local filesystem;
    on a network one cache/runs-index/<name>-<digest of root's path>/<host>.sqlite."""
    if not is_network(fstype):
        return root / INDEX_FILE
    digest = hashlib.sha256(os.fsencode(root)).hexdigest()[:16]
    return cache / "runs-index" / f"{root.name or 'root'}-{digest}" / f"{host}.sqlite"


def local_cache() -> Path:
    """gaccum's cache folder on this host: $XDG_CACHE_HOME/gaccum, else ~/.cache/gaccum; where that is on a
    network filesystem too (a shared home), gaccum-<uid> in the temporary folder."""
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser().absolute()
    if not is_network(fs_type(home.resolve())):
        return home / "gaccum"
    return Path(tempfile.gettempdir()) / f"gaccum-{os.getuid()}"


def this_host_index(root: str | Path) -> tuple[Path, str]:
    """(the index file of the runs directory root on this host, the type of root's filesystem)."""
    return _this_host_index(Path(root).expanduser().resolve())


@functools.lru_cache(maxsize=64)
def _this_host_index(resolved: Path) -> tuple[Path, str]:
    """Once per process and runs directory: a listing every second reads no mount table."""
    kind = fs_type(resolved)
    cache = local_cache() if is_network(kind) else Path()  # read only where it is used
    return index_file(resolved, kind, socket.gethostname(), cache), kind


def describe(root: str | Path) -> str:
    """One line: where this host keeps the runs directory's index, and why there."""
    path, kind = this_host_index(root)
    if is_network(kind):
        return f"{path} (this host's own: the runs directory is on {kind}, a network filesystem)"
    return f"{path} (beside the runs: " + (f"{kind}, a local filesystem)" if kind else "no filesystem type known here)")

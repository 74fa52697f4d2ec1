"""Which process owns a run (or a sweep): an exclusive lock on the run directory's `.claim` file.

The runner that queues a run (a server, a CLI) takes the claim before it writes anything and holds it
until the run ends; the kernel drops it when that process dies, however it dies. A second runner, in
another server or command line, is refused the claim and names the first; a sweep job claims
the sweep's folder the same way, so the same sweep never goes twice at once. A worker process trains
under its runner's claim and writes its own pid to status.json: a worker still finishing after its
runner died (it stops at its next micro-batch) counts as training too.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import psutil

CLAIM_FILE = ".claim"


class RunBusyError(RuntimeError):
    """The run is queued or training (here or in another process): it cannot be resumed or deleted now."""


def describe_process(pid: int) -> str:
    """'process 123 (gaccum run …)': which program, so that a user can find it."""
    try:
        command = " ".join(psutil.Process(pid).cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return f"process {pid}"
    if len(command) > 120:
        command = command[:119] + "…"
    return f"process {pid} ({command})" if command else f"process {pid}"


class Claim:
    """An exclusive claim on a run directory (or a sweep's), held until release() or this process's end;
    `what` names it in a second claimant's refusal (default: "run <directory name>")."""

    def __init__(self, run_dir: Path, what: str = "") -> None:
        self.run_dir = run_dir
        fd = os.open(run_dir / CLAIM_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_text(fd)
            os.close(fd)
            raise RunBusyError(f"{what or 'run ' + run_dir.name} is owned by {holder}: another server or command "
                               "line is running it; stop it there first") from None
        except BaseException:
            os.close(fd)
            raise
        try:  # who holds it, for a second claimant's message: the lock, not this text, is the claim
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # a full disk: the claim holds all the same, the message then says "another process"
        self._fd: int | None = fd

    def release(self) -> None:
        """Give the run up (idempotent); the file stays, unlocked."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the only descriptor drops the lock

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder_text(fd: int) -> str:
    try:
        return describe_process(int(os.pread(fd, 32, 0).decode().strip()))
    except (OSError, ValueError):
        return "another process"


def claimed_by(run_dir: Path) -> str | None:
    """Who owns the run ('process 123 (…)'), or None when no process does. A claim this process holds
    counts: flock conflicts between two descriptors of one process too."""
    try:
        fd = os.open(run_dir / CLAIM_FILE, os.O_RDONLY)
    except OSError:
        return None  # no claim file: never claimed (or a run written before claims)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return _holder_text(fd)
    finally:
        os.close(fd)


def training_pid(pid: object) -> bool:
    """Whether pid (status.json's) is a live gaccum process other than this one: a server, a command line,
    a worker or a rank still training the run."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or pid == os.getpid():
        return False
    try:
        command = " ".join(psutil.Process(pid).cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return "gaccum" in command or "streamlit" in command


def owner(run_dir: Path, status: dict) -> str | None:
    """Who trains the run now, from another process: its claim's holder, else the live process
    status.json names; None when nobody does (a run on disk as running is then interrupted)."""
    holder = claimed_by(run_dir)
    if holder is not None:
        return holder
    pid = status.get("pid")
    return describe_process(pid) if training_pid(pid) else None

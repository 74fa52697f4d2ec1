"""Which rank failed a torchrun job: from the error files its ranks wrote (a Python error, through @record)
and from torchrun's report on its stderr, which gives each failed rank's exit code or signal.

A rank killed by a signal (the out-of-memory killer, a kill by hand, a crash) writes no error file; the
others then fail on its closed connections ("Connection reset", "Connection closed by peer") and write
theirs, and torchrun ends the rest with SIGTERM. So the rank that died by a signal with no error of its own,
torchrun's teardown aside, is the cause; else the rank whose error came first. Pure but for the error files.
"""

from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

# The lines of torchrun's report (ChildFailedError) and of its teardown ("Sending process 123 closing signal").
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)")
_ERROR_FILE = re.compile(r"^\s*error_file\s*:\s*(\S+)")
_CLOSED = re.compile(r"Sending process (\d+) closing signal")
_NO_FILE = "<N/A>"


@dataclass(frozen=True)
class RankEnd:
    """A failed rank as torchrun reports it: global rank, exit code (-N: signal N), pid, whether it wrote an
    error file."""

    rank: int
    exitcode: int
    pid: int
    error_file: bool


def report_line(line: str) -> bool:
    """Whether a line of torchrun's stderr is one of its report's (kept, however long the ranks' tracebacks)."""
    return any(pattern.search(line) for pattern in (_RANK, _EXIT, _ERROR_FILE, _CLOSED))


def rank_ends(lines: Iterable[str]) -> list[RankEnd]:
    """Each failed rank of torchrun's report, in its order: a rank line, then its exitcode and error_file."""
    ends, rank, exit_pid = [], None, None
    for line in lines:
        if found := _RANK.search(line):
            rank, exit_pid = int(found[1]), None
        elif (found := _EXIT.search(line)) and rank is not None:
            exit_pid = int(found[1]), int(found[2])
        elif (found := _ERROR_FILE.search(line)) and rank is not None and exit_pid is not None:
            ends.append(RankEnd(rank, *exit_pid, found[1] != _NO_FILE))
            rank, exit_pid = None, None
    return ends


def killed_rank(lines: list[str]) -> RankEnd | None:
    """The rank that died by a signal with no error of its own, not one torchrun closed; a SIGTERM counts
    last (torchrun's teardown sends it), then the lowest rank. None when every rank failed in Python."""
    closed = {int(found[1]) for line in lines if (found := _CLOSED.search(line))}
    killed = [end for end in rank_ends(lines) if end.exitcode < 0 and not end.error_file and end.pid not in closed]
    return min(killed, key=lambda end: (end.exitcode == -signal.SIGTERM, end.rank), default=None)


def exit_words(code: int) -> str:
    """'exit code 1', or 'signal SIGKILL (9)' for a process a signal ended (code -9)."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name} ({-code})"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def first_error(log_dir: Path) -> str:
    """The first failing rank's message from torchrun's error files, or '' when none wrote one."""
    failures = []
    for path in log_dir.glob("**/error.json"):
        try:
            error = json.loads(path.read_text(encoding="utf-8"))["message"]
            failures.append((int(error["extraInfo"]["timestamp"]), path.parent.name, error["message"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    if not failures:
        return ""
    _, local_rank, message = min(failures)
    # torchrun's message is the exception ("Type: text"), then the Python stack after "At:". The folder
    # is the local rank; this machine is node 0, whose local ranks are the global ranks 0..nproc-1
    # (static rendezvous). Ranks on other machines write their error files there.
    first = next((line.strip() for line in str(message).splitlines() if line.strip()), "no message")
    return f"rank {local_rank} failed: {first[:300]}"


def job_failure(log_dir: Path, report: list[str]) -> str:
    """Why the job failed: the rank killed by a signal, then the first error after it; else the first error;
    '' when neither the report nor the error files say."""
    killed, error = killed_rank(report), first_error(log_dir)
    if killed is None:
        return error
    return (f"rank {killed.rank} died ({exit_words(killed.exitcode)}) with no error of its own"
            + (f"; after it, {error}" if error else ""))

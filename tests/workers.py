"""Process runners at a test's end: what the tests that start worker processes share."""

import contextlib
import os
import signal
import time

from gaccum_core.runs.runner import Runner


def wait_warm(runner: Runner, timeout_s: float = 180) -> None:
    """Wait until the runner's spare worker is warm: the Train page keeps Start disabled until then."""
    deadline = time.monotonic() + timeout_s
    while runner.spare_warming():
        assert time.monotonic() < deadline, "the spare worker never said it was warm"
        time.sleep(0.05)


def close_now(runner: Runner) -> None:
    """Close the runner, first killing the warm spare it started when the test's last run ended: that spare is
    still importing torch and no run will come, so close() would wait 2 s for it to read the end of its input."""
    if runner.spare_pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(runner.spare_pid, signal.SIGKILL)
    runner.close()

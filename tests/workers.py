"""Process runners at a test's end: what the tests that start worker processes share."""

import contextlib
import os
import signal

from gaccum_core.runs.runner import Runner


def close_now(runner: Runner) -> None:
    """Close the runner, first killing the warm spare it started when the test's last run ended: that spare is
    still importing torch and no run will come, so close() would wait 2 s for it to read the end of its input."""
    if runner.spare_pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(runner.spare_pid, signal.SIGKILL)
    runner.close()

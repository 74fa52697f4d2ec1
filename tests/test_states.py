"""How a run's end reads in one line (the CLI's last line, the pages' error under a failed run)."""

import pytest

from gaccum_core.states import RunState, state_line


@pytest.mark.parametrize("state,message,line", [
    (RunState.STOPPED, "stopped by the user", "stopped by the user"),  # "stopped: stopped by the user" before
    (RunState.STOPPED, "stopped before its first step", "stopped before its first step"),
    (RunState.STOPPED, "the process that started the run exited", "stopped: the process that started the run exited"),
    (RunState.FAILED, "rank 1 failed: RuntimeError: boom", "failed: rank 1 failed: RuntimeError: boom"),
    (RunState.FAILED, "failed: disk full", "failed: disk full"),
    (RunState.DIVERGED, "diverged at step 5: the loss is nan", "diverged at step 5: the loss is nan"),
    (RunState.FINISHED, "", "finished"),
])
def test_the_state_is_said_once(state, message, line):
    assert state_line(state, message) == line

"""Soak: 20 short runs back to back (some stopped, one failing) leave no thread, file or memory behind."""

import gc
import threading
import time

import psutil
import pytest

from gaccum_core import faults
from gaccum_core.config import RunConfig
from gaccum_core.execution.runner import Runner

pytestmark = pytest.mark.soak

TINY = dict(device="cpu", model="cnn", micro_batch_size=16, accum_steps=2, max_steps=6)
MB = 1024 * 1024
THREAD_EXIT_GUARD_S = 60.0  # a hang guard only, for all threads together: an idle worker exits at once


def resources() -> tuple[int, int, float]:
    """(threads, open file descriptors, resident MB) of this process, after a collection."""
    gc.collect()
    process = psutil.Process()
    return threading.active_count(), process.num_fds(), process.memory_info().rss / MB


def join_new_threads(before: set[threading.Thread]) -> None:
    """Wait for threads started since `before` (the runner's idle workers) to end; a leaked one stays
    alive and is then counted by the caller's assertion."""
    deadline = time.monotonic() + THREAD_EXIT_GUARD_S
    for thread in set(threading.enumerate()) - before:
        thread.join(max(deadline - time.monotonic(), 0.0))


def test_twenty_runs_leave_no_thread_file_or_memory_behind(tmp_path, gate):
    before = set(threading.enumerate())
    runner = Runner(tmp_path)
    assert runner.wait(runner.submit(RunConfig(**TINY))).state == "finished"  # warm-up: first-use allocations
    join_new_threads(before)
    threads0, fds0, rss0 = resources()
    before = set(threading.enumerate())
    expected, outcomes = [], []
    for i in range(20):
        if i == 7:
            faults.arm(faults.Fault("oom", step=3))
            expected.append(("failed", 2))
        elif i % 5 == 4:
            gate.hold(step=3)  # held mid-run, so the stop lands before the run could finish
            expected.append(("stopped", 2))
        else:
            expected.append(("finished", 6))
        run_id = runner.submit(RunConfig(**{**TINY, "seed": i}))
        if i % 5 == 4:
            gate.wait_until_held()
            runner.stop(run_id)
            gate.release()
        snap = runner.wait(run_id)
        outcomes.append((snap.state, snap.steps_done))
    join_new_threads(before)
    threads1, fds1, rss1 = resources()
    states = [state for state, _ in outcomes]
    print(f"\nsoak: 20 runs {dict((str(s), states.count(s)) for s in set(states))}; threads {threads0} -> {threads1}, "
          f"open files {fds0} -> {fds1}, RSS {rss0:.1f} -> {rss1:.1f} MB ({rss1 - rss0:+.1f} MB)")
    assert outcomes == expected
    assert threads1 == threads0
    assert fds1 == fds0
    assert rss1 - rss0 < 40, "memory grows run after run"
    assert len(runner.store.list_runs()) == 21

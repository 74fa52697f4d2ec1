"""Soak: 20 short runs back to back (some stopped, one failing) leave no thread, file or memory behind."""

import gc
import threading
import time

import psutil

from gaccum_core import faults
from gaccum_core.config import RunConfig
from gaccum_core.runner import Runner

TINY = dict(device="cpu", model="cnn", micro_batch_size=16, accum_steps=2, max_steps=6)
MB = 1024 * 1024


def resources():
    """(threads, open file descriptors, resident MB) of this process, after a collection."""
    gc.collect()
    process = psutil.Process()
    return threading.active_count(), process.num_fds(), process.memory_info().rss / MB


def settle(baseline_threads, timeout_s=10.0):
    """Give finished worker threads a moment to exit."""
    deadline = time.monotonic() + timeout_s
    while threading.active_count() > baseline_threads and time.monotonic() < deadline:
        time.sleep(0.05)


def test_twenty_runs_leave_no_thread_file_or_memory_behind(tmp_path):
    runner = Runner(tmp_path)
    runner.wait(runner.submit(RunConfig(**TINY)), timeout=60)  # warm-up: first-use allocations
    settle(1)
    threads0, fds0, rss0 = resources()
    states = []
    for i in range(20):
        if i == 7:
            faults.arm(faults.Fault("oom", step=3))
        run_id = runner.submit(RunConfig(**{**TINY, "seed": i}))
        if i % 5 == 4:
            while runner.snapshot(run_id).steps_done < 2 and not runner.snapshot(run_id).done:
                time.sleep(0.005)
            runner.stop(run_id)
        states.append(runner.wait(run_id, timeout=120).state)
    settle(threads0)
    threads1, fds1, rss1 = resources()
    print(f"\nsoak: 20 runs {dict((s, states.count(s)) for s in set(states))}; threads {threads0} -> {threads1}, "
          f"open files {fds0} -> {fds1}, RSS {rss0:.1f} -> {rss1:.1f} MB ({rss1 - rss0:+.1f} MB)")
    assert states.count("failed") == 1 and states.count("stopped") == 4 and states.count("finished") == 15
    assert threads1 == threads0
    assert fds1 == fds0
    assert rss1 - rss0 < 40, "memory grows run after run"
    assert len(runner.store.list_runs()) == 21

"""A warm torchrun job nobody asks for is ended after the idle limit (GACCUM_SPARE_IDLE_S), with every rank it
started, and never before; the page's next ask for N > 1 starts another; the home page's words say what waits."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from gaccum_core.config import RunConfig
from gaccum_core.execution import spares
from gaccum_core.execution.runner import Runner
from gaccum_core.execution.supervisor import Spare

TWO = RunConfig(model="mlp", dataset="digits", device="cpu", micro_batch_size=4, nproc=2)
WAIT_S = 120  # only so a broken test fails instead of hanging


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _waiting_proc(job: spares.SpareJob) -> subprocess.Popen:
    return job._job.proc  # noqa: SLF001 - the process whose end the test checks


def _ranks(torchrun: subprocess.Popen, count: int) -> list[psutil.Process]:
    """The job's rank processes, once torchrun has started `count` of them."""
    deadline = time.monotonic() + WAIT_S
    while len(children := psutil.Process(torchrun.pid).children(recursive=True)) < count:
        assert time.monotonic() < deadline and torchrun.poll() is None, "torchrun never started its ranks"
        time.sleep(0.05)
    return children


def _all_gone(processes: list[psutil.Process]) -> bool:
    deadline = time.monotonic() + WAIT_S
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in processes):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.multiprocess
def test_an_idle_torchrun_job_ends_with_its_ranks_after_the_limit_and_not_before():
    """Idle limit 0.5 s on a clock the test moves: at 0.4 s unasked the job and both ranks live (the watcher
    looks every 0.1 s meanwhile), at 0.6 s they are all gone and the job's folder with them; asked again, a
    new job starts."""
    clock = Clock()
    job = spares.SpareJob(keep=True, idle_limit_s=0.5, clock=clock)
    try:
        job.prepare(TWO)
        torchrun = _waiting_proc(job)
        spare_dir = job._job.spare_dir  # noqa: SLF001
        processes = [psutil.Process(torchrun.pid), *_ranks(torchrun, 2)]
        clock.now += 0.4
        time.sleep(1.0)  # ten looks of the watcher at a job idle for less than the limit
        assert all(p.is_running() for p in processes) and job.waiting() == (2, pytest.approx(0.4))
        clock.now += 0.2
        assert _all_gone(processes), [p.pid for p in processes if p.is_running()]
        deadline = time.monotonic() + WAIT_S  # the folder goes right after the processes, in the watcher's thread
        while spare_dir.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert job.waiting() is None and not spare_dir.exists()
        job.prepare(TWO)  # the Train page, N = 2 again
        assert job.waiting() == (2, 0.0)
        assert _waiting_proc(job).pid != torchrun.pid and _waiting_proc(job).poll() is None
    finally:
        job.close()


@pytest.fixture
def fake_jobs(monkeypatch):
    """Processes standing for torchrun jobs (nothing imports torch) and no spare worker; the list of them."""
    jobs: list[subprocess.Popen] = []

    def fake_job(config, spare_dir):
        jobs.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]))
        return jobs[-1]

    monkeypatch.setattr(spares, "spawn_spare_job", fake_job)
    monkeypatch.setattr(spares, "spawn_spare", lambda: None)
    yield jobs
    for proc in jobs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_runner_ends_an_idle_job_by_itself_and_the_next_ask_starts_one(tmp_path, fake_jobs):
    """Runner(spare_idle_s=0.5): nothing but time ends the job; prepare() with N = 2 then starts another."""
    runner = Runner(tmp_path, executor="process", spare_idle_s=0.5)
    try:
        runner.prepare(TWO)
        assert len(fake_jobs) == 1
        assert runner.warm_text().startswith("warm: a 2-rank torchrun job, idle ")
        assert runner.warm_text().endswith(", ends after 0.5 s idle")
        assert fake_jobs[0].wait(WAIT_S) is not None
        assert runner.warm_text() == ""
        runner.prepare(TWO)
        assert len(fake_jobs) == 2 and fake_jobs[1].poll() is None
    finally:
        runner.close()
    assert fake_jobs[1].poll() is not None  # close() kills the waiting job


def test_asking_again_keeps_the_job_and_starts_its_idle_time_again(fake_jobs):
    """The Train page asks at each of its runs while N > 1 is set: a job in use is never ended under it."""
    clock = Clock()
    job = spares.SpareJob(keep=True, idle_limit_s=300, clock=clock)
    try:
        job.prepare(TWO)
        clock.now += 200
        job.prepare(TWO)
        clock.now += 200  # 400 s since the job started, 200 s since the last ask
        assert job.waiting() == (2, 200.0) and len(fake_jobs) == 1
        assert fake_jobs[0].poll() is None
    finally:
        job.close()


def test_the_words_say_what_waits_and_when_the_job_ends(fake_jobs):
    clock = Clock()
    ready = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, text=True)
    event = spares.threading.Event()
    event.set()
    worker = spares.SpareWorker(keep=True, first=Spare(ready, event))
    job = spares.SpareJob(keep=True, idle_limit_s=300, clock=clock)
    try:
        assert spares.warm_words(worker, job) == "warm: a 1-process worker"
        job.prepare(TWO)
        clock.now += 185
        assert spares.warm_words(worker, job) == ("warm: a 1-process worker; a 2-rank torchrun job, idle 3 min, "
                                                  "ends after 5 min idle")
        job.idle_limit_s = float("inf")
        assert spares.warm_words(worker, job).endswith("a 2-rank torchrun job, idle 3 min")
    finally:
        job.close()
        worker.close()


@pytest.mark.parametrize("text", ["0", "-5", "soon", "nan"])
def test_an_idle_limit_that_is_not_a_positive_number_is_refused_by_name(text):
    with pytest.raises(ValueError, match=f"GACCUM_SPARE_IDLE_S='{text}' is not allowed: a number of seconds"):
        spares.idle_limit(text)


def test_the_idle_limit_defaults_to_five_minutes_and_takes_seconds():
    assert spares.idle_limit(None) == spares.idle_limit("") == 300.0
    assert spares.idle_limit("0.5") == 0.5 and spares.idle_limit("inf") == float("inf")

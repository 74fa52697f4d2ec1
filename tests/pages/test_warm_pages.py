"""What the server keeps warm, on the pages: the home page says it, the Train page keeps Start disabled until the
spare worker is warm, and sets a torchrun job warming again when N > 1 is chosen after an idle one ended."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import server
from gaccum_core.config import RunConfig
from gaccum_core.execution import spares
from gaccum_core.execution import supervisor
from gaccum_core.execution.supervisor import Spare

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 120  # only so a broken test fails instead of hanging


class Fakes:
    """Processes standing for the spare worker and torchrun jobs (nothing imports torch), and whether the next
    spare is warm."""

    def __init__(self) -> None:
        self.spares: list[Spare] = []
        self.jobs: list[subprocess.Popen] = []
        self.warm = True

    def spare(self) -> Spare:
        proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                                text=True)
        self.spares.append(Spare(proc, threading.Event()))
        if self.warm:
            self.spares[-1].ready.set()
        return self.spares[-1]

    def job(self, config, spare_dir) -> subprocess.Popen:
        self.jobs.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]))
        return self.jobs[-1]


@pytest.fixture
def fakes(runs_dir, monkeypatch):
    """The process executor with fake spares and jobs; the runner closed and every fake ended after."""
    made = Fakes()
    monkeypatch.setenv("GACCUM_EXECUTOR", "process")
    monkeypatch.setattr(spares, "spawn_spare", made.spare)
    monkeypatch.setattr(spares, "spawn_spare_job", made.job)
    monkeypatch.setattr(supervisor, "spawn_spare", made.spare)  # the warm-up's first spare, if it starts here
    yield made
    server.get_runner().close()
    for proc in [s.proc for s in made.spares] + made.jobs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _train_page() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app_pages/1_Train.py"), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_home_page_says_what_is_warm_and_when_the_job_ends(fakes):
    server.get_runner().prepare(RunConfig(nproc=2, device="cpu"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    assert server.wait(60)  # the warm-up the page started has ended: the page shows the runner's spares
    at.run()
    assert not at.exception
    (line,) = [c.value for c in at.caption if c.value.startswith("warm:")]
    assert line.startswith("warm: a 1-process worker; a 2-rank torchrun job, idle ")
    assert line.endswith(", ends after 5 min idle")


def test_start_stays_disabled_until_the_spare_worker_is_warm(fakes):
    fakes.warm = False
    at = _train_page()
    assert at.button(key="start").disabled
    assert any("importing torch" in c.value for c in at.caption)
    fakes.spares[-1].ready.set()  # the spare has imported torch and loaded the data
    at.run()
    assert not at.button(key="start").disabled
    assert not any("importing torch" in c.value for c in at.caption)


def test_choosing_two_processes_again_warms_a_new_job_after_the_idle_one_ended(fakes, monkeypatch):
    monkeypatch.setenv("GACCUM_SPARE_IDLE_S", "0.5")
    at = _train_page()
    at.number_input(key="cfg_nproc").set_value(2).run()
    assert len(fakes.jobs) == 1
    assert fakes.jobs[0].wait(WAIT_S) is not None  # nobody asked for it for 0.5 s: ended
    assert server.get_runner().warm_text() == "warm: a 1-process worker"
    at.run()  # the page again, N still 2
    assert len(fakes.jobs) == 2 and fakes.jobs[1].poll() is None
    assert "a 2-rank torchrun job" in server.get_runner().warm_text()

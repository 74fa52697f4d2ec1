"""Fixtures of the multi-process tests (DDP and FSDP): shared 2-process jobs, and runners of a test's own."""

from __future__ import annotations

import pytest

from gaccum_core.runs.runner import Runner
from jobs import Jobs


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """The module's shared 2-process jobs, each run once on first use (no fault is armed in their environment)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("GACCUM_FAULTS", raising=False)
        patch.delenv("GACCUM_FAULTS_RANK", raising=False)
        runner = Runner(str(tmp_path_factory.mktemp("job_runs")), executor="thread")
        try:
            yield Jobs(runner)
        finally:
            runner.close()


@pytest.fixture
def make_runner(tmp_path):
    """Runners of the test's own (for a test that arms faults through the environment), closed after it."""
    made: list[Runner] = []

    def make(**options) -> Runner:
        made.append(Runner(str(tmp_path), executor="thread", **options))
        return made[-1]

    yield make
    for runner in made:
        runner.close()

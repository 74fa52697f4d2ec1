"""Fixtures of the multi-process tests (DDP and FSDP): runners of a test's own."""

from __future__ import annotations

import pytest

from gaccum_core.execution.runner import Runner


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

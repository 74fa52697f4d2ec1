"""Fixtures the page tests share."""

from pathlib import Path

import pytest

from gaccum_core.config import RunConfig
from gaccum_core.execution.runner import Runner


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """The directory of one finished tiny run (mlp, 2 steps: config, status, both CSVs, model.pt), trained once
    per module, for tests to copy into their runs directory."""
    runs = tmp_path_factory.mktemp("runs")
    runner = Runner(runs, executor="thread")
    run_id = runner.submit(RunConfig(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2, max_steps=2))
    assert runner.wait(run_id, timeout=120).state == "finished"
    return runs / run_id

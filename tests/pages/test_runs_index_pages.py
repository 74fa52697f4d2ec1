"""The home and Runs pages while runs are read into the runs index: a bar with runs read / to read, gone once
they are read, and no bar (no run folder read) on the next visit."""

import shutil
from pathlib import Path

import pytest
from streamlit.delta_generator import DeltaGenerator
from streamlit.testing.v1 import AppTest

import dashboard.indexing
import gaccum_core.runs.index as index

ROOT = Path(__file__).resolve().parents[2]
RUNS = 5


@pytest.fixture
def unindexed(finished_run, runs_dir, monkeypatch) -> list[str]:
    """RUNS copies of a finished run, never indexed; a bar from one run to read, a batch of 2 runs; each bar's
    texts, in the order drawn."""
    for i in range(RUNS):
        shutil.copytree(finished_run, runs_dir / f"{finished_run.name}-{i}")
    index._SEEN.clear()  # a server just started
    monkeypatch.setattr(dashboard.indexing, "SHOWN_FROM", 1)
    monkeypatch.setattr(index, "BATCH", 2)
    texts, real = [], DeltaGenerator.progress
    monkeypatch.setattr(DeltaGenerator, "progress", lambda self, value, text=None: texts.append(text) or real(
        self, value, text))
    yield texts
    index._SEEN.clear()


@pytest.mark.parametrize("page", ["app.py", "app_pages/2_Runs.py"])
def test_a_page_shows_the_runs_read_into_the_index_then_takes_the_bar_away(unindexed, page):
    at = AppTest.from_file(str(ROOT / page), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    assert [text.split(": ")[1].split(" read")[0] for text in unindexed] == ["0 of 5", "2 of 5", "4 of 5"]
    assert "Only this once" in unindexed[0]
    assert not at.get("progress")  # taken away once every run is read
    assert len(at.dataframe[0].value) == RUNS
    unindexed.clear()
    at.run()
    assert unindexed == [] and len(at.dataframe[0].value) == RUNS  # indexed: nothing to read, no bar

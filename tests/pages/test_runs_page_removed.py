"""Issue 29 H: a selected run deleted while the Runs page draws (in another tab, session or process) is said
to be removed; the page draws the other selected runs, their settings, charts and downloads, and raises nothing."""

import json
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from gaccum_core.runs import catalog
from gaccum_core.runs.store import RunStore

ROOT = Path(__file__).resolve().parents[2]
RUNS, SELECTED = 12, 10  # picked[7] is one that goes: more cost seconds, check nothing more
READS = ["read_config", "read_metrics", "read_evals", "metrics_csv", "evals_csv"]


@pytest.fixture
def selected(finished_run, runs_dir, downloads) -> tuple[AppTest, list[str]]:
    """The Runs page over RUNS runs, SELECTED of them selected: (the page, the selected ids)."""
    ids = [f"{finished_run.name}-{i:03d}" for i in range(RUNS)]
    for run_id in ids:
        shutil.copytree(finished_run, runs_dir / run_id)
    at = AppTest.from_file(str(ROOT / "app_pages/2_Runs.py"), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    picked = ids[:SELECTED]
    at.multiselect(key="runs_selected").set_value(picked).run()
    assert not at.exception, [e.value for e in at.exception]
    return at, picked


def _said_removed(at: AppTest, run_id: str) -> bool:
    return any(run_id in i.value and "removed" in i.value for i in at.info)


def _drawn(at: AppTest) -> set[str]:
    """The runs the loss chart draws (each trace is grouped under its run's id)."""
    loss = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.key == "runs_chart_loss")
    return {trace["legendgroup"] for trace in loss["data"]}


def _check_the_others_drawn(at: AppTest, gone: str, others: list[str], downloads: dict) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert _said_removed(at, gone), [i.value for i in at.info]
    assert _drawn(at) == set(others)
    assert all(f"{r}-metrics.csv" in downloads and f"{r}-eval.csv" in downloads for r in others)
    combined = downloads["gaccum-runs.csv"].decode()
    assert gone not in combined and all(r in combined for r in others)


@pytest.mark.parametrize("read", READS)
def test_a_selected_run_whose_file_is_gone_when_read_is_said_removed(selected, read, monkeypatch, downloads):
    at, picked = selected
    gone = picked[7]
    real = getattr(RunStore, read)

    def deleted_meanwhile(store, run_id):
        if run_id == gone:
            raise FileNotFoundError(2, "No such file or directory", str(store.path(run_id)))
        return real(store, run_id)

    monkeypatch.setattr(RunStore, read, deleted_meanwhile)
    downloads.clear()
    at.run()
    _check_the_others_drawn(at, gone, [r for r in picked if r != gone], downloads)


def test_a_selected_run_deleted_after_the_table_is_read_is_said_removed(selected, monkeypatch, downloads):
    at, picked = selected
    gone = picked[0]
    real = catalog.run_table

    def then_deleted(store, *args, **kwargs):
        table = real(store, *args, **kwargs)
        shutil.rmtree(store.path(gone), ignore_errors=True)
        return table

    monkeypatch.setattr(catalog, "run_table", then_deleted)
    downloads.clear()
    at.run()
    _check_the_others_drawn(at, gone, picked[1:], downloads)
    at.run()  # the next draw: the run has left the table and the selection, and is not said removed again
    assert not at.exception and gone not in set(at.dataframe(key="runs_table").value["run_id"])
    assert not [i.value for i in at.info if "removed" in i.value] and _drawn(at) == set(picked[1:])


def test_a_selected_run_deleted_while_the_table_is_read_is_said_removed_not_damaged(selected, monkeypatch):
    at, picked = selected
    gone = picked[3]
    real = RunStore.list_runs

    def listed_then_deleted(store):
        listed = real(store)
        shutil.rmtree(store.path(gone), ignore_errors=True)  # before the table reads its files
        return listed

    monkeypatch.setattr(RunStore, "list_runs", listed_then_deleted)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert gone not in set(at.dataframe(key="runs_table").value["run_id"])
    assert not [w.value for w in at.warning if "Damaged" in w.value]
    assert _said_removed(at, gone), [i.value for i in at.info]
    assert _drawn(at) == set(picked) - {gone}

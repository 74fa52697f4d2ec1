"""The runs index: rows equal to what the folders say, read again only when a run's files change, gone with
the run, rebuilt when damaged, consistent when two processes write it at once, and a listing with nothing
changed that reads no run folder (also in a process just started: a server restarted)."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pandas as pd
import pytest

import gaccum_core.runs.catalog as catalog
import gaccum_core.runs.index as index
from gaccum_core.config import RunConfig
from gaccum_core.faults import Fault, arm
from gaccum_core.runs.catalog import describe_run, run_table
from gaccum_core.runs.claim import Claim
from gaccum_core.runs.index_place import INDEX_FILE
from gaccum_core.execution.runner import Runner
from gaccum_core.runs.store import RunStore
from index_writers import write_rounds

TINY = RunConfig(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2, max_steps=3)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    """Folders of a finished, a failed and a diverged run, trained once for the module."""
    runner = Runner(tmp_path_factory.mktemp("trained"), executor="thread")
    folders = {}
    for kind, fault in (("finished", None), ("failed", Fault("error", 2)), ("diverged", Fault("nan", 2))):
        if fault is not None:
            arm(fault)
        run_id = runner.submit(TINY, name=kind)
        assert runner.wait(run_id, timeout=120).state == kind
        folders[kind] = runner.store.path(run_id)
    return folders


@pytest.fixture
def runs(tmp_path, trained, restarted) -> tuple[RunStore, dict[str, str]]:
    """A runs directory with a run of every state: finished (tagged), failed, diverged, stopped before a first
    step, queued by a server now gone (interrupted), running in another process (its claim held), damaged,
    and one whose tags.json does not read."""
    store, ids = RunStore(tmp_path / "runs"), {}
    store.root.mkdir()
    for kind, folder in trained.items():
        shutil.copytree(folder, store.root / folder.name)
        ids[kind] = folder.name
    store.write_tags(ids["finished"], ["ref", "sgd"])
    ids["stopped"] = store.create(TINY, name="stopped")
    store.update_status(ids["stopped"], state="stopped", message="stopped before its first step")
    ids["interrupted"] = store.create(TINY, name="queued")
    ids["elsewhere"] = store.create(TINY, name="elsewhere")
    store.update_status(ids["elsewhere"], state="running")
    ids["damaged"] = store.create(TINY, name="damaged")
    (store.path(ids["damaged"]) / "config.json").write_text("{not json", encoding="utf-8")
    ids["bad tags"] = store.create(TINY, name="bad tags")
    store.update_status(ids["bad tags"], state="stopped")
    (store.path(ids["bad tags"]) / "tags.json").write_text('"a string"', encoding="utf-8")
    claim = Claim(store.path(ids["elsewhere"]))
    yield store, ids
    claim.release()


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """The run folders read from now on (catalog.disk_row is the index's only reader)."""
    read, real = [], catalog.disk_row
    monkeypatch.setattr(catalog, "disk_row", lambda store, run_id: read.append(run_id) or real(store, run_id))
    return read


def _assert_rows_are_the_folders(table: pd.DataFrame, store: RunStore) -> None:
    """The table is the one made of each run's row read from its folder (describe_run), cell for cell."""
    expected = pd.DataFrame([describe_run(store, run_id) for run_id in reversed(store.list_runs())])
    pd.testing.assert_frame_equal(table, expected)


def _stored(store: RunStore) -> dict[str, dict]:
    """The rows in the index file, read with sqlite3 itself."""
    with closing(sqlite3.connect(store.root / INDEX_FILE)) as db:
        (table,) = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {run_id: json.loads(data) for run_id, data in db.execute(f"SELECT run_id, data FROM {table}")}


def test_index_rows_are_what_the_folders_say_for_runs_of_every_state(runs, restarted, reads):
    store, ids = runs
    first = run_table(store)
    assert sorted(reads) == sorted(ids.values())  # a first listing reads every folder, and indexes it
    states = dict(zip(first["run_id"], first["state"]))
    assert [states[ids[k]] for k in ("finished", "failed", "diverged", "stopped", "interrupted", "elsewhere",
                                     "damaged")] == ["finished", "failed", "diverged", "stopped", "interrupted",
                                                     "running", "damaged"]
    restarted()
    reads.clear()
    again = run_table(store)  # every row from the index file
    assert reads == []
    _assert_rows_are_the_folders(again, store)
    row = again.set_index("run_id").loc
    assert row[ids["finished"], "tags"] == ("ref", "sgd") and row[ids["finished"], "steps"] == 3
    assert row[ids["elsewhere"], "message"].startswith("training in process")
    assert "tags.json" in row[ids["bad tags"], "message"] and "config.json" in row[ids["damaged"], "message"]
    assert set(_stored(store)) == set(ids.values())


def test_a_second_listing_with_nothing_changed_reads_no_run_folder(runs, restarted, reads):
    store, ids = runs
    run_table(store)
    reads.clear()
    run_table(store)
    assert reads == []
    restarted()
    run_table(store, hide_unstepped=True)
    assert reads == []


def test_a_run_changed_on_disk_after_indexing_is_read_again(runs, restarted, reads):
    store, ids = runs
    run_table(store)
    reads.clear()
    metrics = store.path(ids["finished"]) / "metrics.csv"
    last = metrics.read_text(encoding="utf-8").splitlines()[-1].split(",")
    last[0] = "4"  # step 4: one more row appended, as a resumed run writes it
    with metrics.open("a", encoding="utf-8") as f:
        f.write(",".join(last) + "\n")
    store.update_status(ids["stopped"], message="stopped by hand")
    row = run_table(store).set_index("run_id").loc
    assert sorted(reads) == sorted([ids["finished"], ids["stopped"]])
    assert row[ids["finished"], "steps"] == 4 and row[ids["stopped"], "message"] == "stopped by hand"
    store.update_status(ids["failed"], message="edited while the server was down")
    restarted()
    reads.clear()
    table = run_table(store)
    assert reads == [ids["failed"]]
    assert table.set_index("run_id").loc[ids["failed"], "message"] == "edited while the server was down"
    _assert_rows_are_the_folders(table, store)


def test_a_deleted_run_vanishes_from_the_listing_and_the_index(runs, restarted):
    store, ids = runs
    run_table(store)
    store.delete(ids["finished"])  # in this process
    assert ids["finished"] not in set(run_table(store)["run_id"])
    assert ids["finished"] not in _stored(store)
    restarted()
    shutil.rmtree(store.path(ids["failed"]))  # while no server was running
    assert ids["failed"] not in set(run_table(store)["run_id"])
    assert set(_stored(store)) == set(ids.values()) - {ids["finished"], ids["failed"]}


@pytest.mark.parametrize("damage", ["garbage", "cut", "missing"])
def test_a_damaged_or_missing_index_file_is_rebuilt(runs, restarted, reads, damage):
    store, ids = runs
    run_table(store)
    path = store.root / INDEX_FILE
    if damage == "garbage":
        path.write_bytes(b"this is not a database\n" * 200)
    elif damage == "cut":
        with closing(sqlite3.connect(path)) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every row in the file itself, then half of it cut
        path.write_bytes(path.read_bytes()[:4096 + 100])
    else:
        path.unlink()
    restarted()
    reads.clear()
    table = run_table(store)
    assert sorted(reads) == sorted(ids.values())  # every folder read again, none missed
    _assert_rows_are_the_folders(table, store)
    assert set(_stored(store)) == set(ids.values())
    restarted()
    reads.clear()
    run_table(store)
    assert reads == []


def test_a_runs_directory_whose_index_cannot_be_written_is_listed_from_its_folders(runs, monkeypatch, reads):
    store, ids = runs

    def read_only(self, write):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(index.RunIndex, "_connect", read_only)
    table = run_table(store)
    assert sorted(reads) == sorted(ids.values())
    _assert_rows_are_the_folders(table, store)


def test_a_row_json_cannot_hold_is_listed_and_left_out_of_the_index(runs, monkeypatch):
    store, ids = runs
    real = catalog.disk_row

    def odd(store, run_id):
        row = real(store, run_id)
        return {**row, "odd": object()} if run_id == ids["finished"] else row

    monkeypatch.setattr(catalog, "disk_row", odd)
    assert ids["finished"] in set(run_table(store)["run_id"])
    assert set(_stored(store)) == set(ids.values()) - {ids["finished"]}  # read from its folder after a restart


def test_progress_follows_the_runs_read_a_batch_at_a_time(runs, monkeypatch):
    store, ids = runs
    monkeypatch.setattr(index, "BATCH", 3)
    seen = []
    run_table(store, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(0, 8), (3, 8), (6, 8), (8, 8)]
    seen.clear()
    run_table(store, progress=lambda done, total: seen.append((done, total)))
    assert seen == []


def test_the_runner_indexes_a_run_as_it_ends(tmp_path, restarted, reads):
    runner = Runner(tmp_path, executor="thread")
    run_id = runner.submit(TINY)
    assert runner.wait(run_id, timeout=120).state == "finished"
    restarted()
    reads.clear()
    assert run_table(runner.store).loc[0, "state"] == "finished"
    assert reads == []  # its final row was indexed by the runner that ran it
    runner.delete(run_id)
    assert run_id not in _stored(runner.store)


@pytest.mark.multiprocess
def test_two_processes_writing_at_once_leave_a_consistent_index(tmp_path, trained, restarted):
    store = RunStore(tmp_path)
    for i in range(40):
        shutil.copytree(trained["finished"], tmp_path / f"20261101-0000{i:02d}-copy-{i}")
    run_ids = store.list_runs()
    context = multiprocessing.get_context("spawn")
    start, done = context.Barrier(2), context.Queue()
    halves = (run_ids[::2], run_ids[1::2])
    workers = [context.Process(target=write_rounds, args=(str(tmp_path), half, 5, start, done)) for half in halves]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    assert [w.exitcode for w in workers] == [0, 0]
    assert sorted(done.get(timeout=5) for _ in workers) == [20, 20]
    with closing(sqlite3.connect(tmp_path / INDEX_FILE)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    stored = _stored(store)
    assert set(stored) == set(run_ids)
    assert all(row["message"] in {f"round {i}" for i in range(5)} for row in stored.values())  # whole rows only
    restarted()
    _assert_rows_are_the_folders(run_table(store), store)  # a row whose stamp is behind its folder is read again
    assert set(run_table(store)["message"]) == {"round 4"}

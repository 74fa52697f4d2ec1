"""The runs table's filters: by text, state and tag; runs that ended before their first step left out or last."""

import pytest

from gaccum_core.config import RunConfig
from gaccum_core.runs.catalog import all_tags, filter_runs, run_table, unstepped
from gaccum_core.execution.runner import Runner

TINY = dict(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2, max_steps=2)


@pytest.fixture
def runs(tmp_path):
    """Two finished runs (tagged), one stopped and one failed before their first step, one queued on disk."""
    runner = Runner(tmp_path)
    baseline = runner.submit(RunConfig(**TINY), name="baseline")
    bf16 = runner.submit(RunConfig(**{**TINY, "amp": "bf16"}), name="bf16 try")
    runner.wait(baseline, timeout=60), runner.wait(bf16, timeout=60)
    runner.store.write_tags(baseline, ["ref", "sgd"])
    runner.store.write_tags(bf16, ["sgd", "amp"])
    store = runner.store
    stopped = store.create(RunConfig(**TINY), name="stopped early")
    store.update_status(stopped, state="stopped", message="stopped before its first step")
    failed = store.create(RunConfig(**TINY))
    store.update_status(failed, state="failed", message="ValueError: no")
    queued = store.create(RunConfig(**TINY))  # on disk as queued, owned by nobody: interrupted
    return store, dict(baseline=baseline, bf16=bf16, stopped=stopped, failed=failed, queued=queued)


def test_the_table_shows_tags_progress_and_the_peak_training_memory(runs):
    """The memory column is named by what it is: the largest training memory of the run's steps (weights +
    gradients + optimizer state + activations), what its memory chart draws, not the process's resident memory
    (~700 MB on the CPU for every run, whatever accumulation saves)."""
    from dashboard.runs_table import COLUMN_CONFIG
    from gaccum_core.views.run_table import shown_columns

    store, ids = runs
    table = run_table(store).set_index("run_id")
    assert table.loc[ids["baseline"], "tags"] == ("ref", "sgd")
    assert table.loc[ids["baseline"], "progress"] == 1.0 and table.loc[ids["baseline"], "total_steps"] == 2
    assert all_tags(table) == ["amp", "ref", "sgd"]
    steps = store.metric_rows(ids["baseline"])
    assert "peak_mem_mb" not in table.columns
    assert table.loc[ids["baseline"], "peak_train_mem_mb"] == max(step["train_mem_mb"] for step in steps)
    assert table.loc[ids["baseline"], "peak_train_mem_mb"] * 10 < min(step["mem_peak_mb"] for step in steps)
    assert "peak_train_mem_mb" in shown_columns(table)
    assert COLUMN_CONFIG["peak_train_mem_mb"]["label"] == "peak training memory (MB)"


def test_runs_that_ended_before_their_first_step_can_be_left_out(runs):
    store, ids = runs
    every = set(run_table(store)["run_id"])
    assert every == set(ids.values())
    summary = run_table(store, hide_unstepped=True)
    # Runs that ended with no step are left out, one whose server died before it started (interrupted) too.
    assert set(summary["run_id"]) == {ids["baseline"], ids["bf16"]}
    # A run still queued in a live runner is going to train: kept.
    assert set(run_table(store, [ids["queued"]], hide_unstepped=True)["run_id"]) == {
        ids["baseline"], ids["bf16"], ids["queued"]}
    table = run_table(store)
    assert set(table.loc[unstepped(table), "run_id"]) == {ids["stopped"], ids["failed"], ids["queued"]}


def test_filters_by_text_state_and_every_chosen_tag(runs):
    store, ids = runs
    table = run_table(store)
    assert set(filter_runs(table, tags=["sgd"])["run_id"]) == {ids["baseline"], ids["bf16"]}
    assert list(filter_runs(table, tags=["sgd", "amp"])["run_id"]) == [ids["bf16"]]
    assert set(filter_runs(table, states=["stopped", "failed"])["run_id"]) == {ids["stopped"], ids["failed"]}
    assert list(filter_runs(table, text="BF16 TRY")["run_id"]) == [ids["bf16"]]  # the name, any case
    assert list(filter_runs(table, text="first step")["run_id"]) == [ids["stopped"]]  # the message
    assert list(filter_runs(table, text="ref")["run_id"]) == [ids["baseline"]]  # a tag
    assert filter_runs(table, text="nothing like it").empty
    assert filter_runs(table).equals(table)


def test_a_run_is_read_again_only_when_one_of_its_files_changes(runs, monkeypatch):
    import gaccum_core.runs.catalog as catalog

    store, ids = runs
    run_table(store)
    read = []
    real = catalog.disk_row
    monkeypatch.setattr(catalog, "disk_row", lambda store, run_id: read.append(run_id) or real(store, run_id))
    table = run_table(store).set_index("run_id")
    assert read == []  # the interrupted run too: who trains it is asked each time, its files are not read
    assert table.loc[ids["queued"], "state"] == "interrupted"
    store.write_tags(ids["bf16"], ["changed"])
    store.update_status(ids["stopped"], message="edited")
    table = run_table(store).set_index("run_id")
    assert sorted(read) == sorted([ids["bf16"], ids["stopped"]])
    assert table.loc[ids["bf16"], "tags"] == ("changed",) and table.loc[ids["stopped"], "message"] == "edited"
    store.delete(ids["baseline"])
    assert ids["baseline"] not in set(run_table(store)["run_id"])



def test_a_runs_dir_holding_only_a_damaged_run_is_summarised(tmp_path):
    """A folder that is no run (a damaged row has no steps column): the summary and the Train page's look for a
    stopped run list nothing, instead of failing on the missing column."""
    from gaccum_core.runs.store import RunStore

    (tmp_path / "20260101-000000-abcdef-notarun").mkdir()
    store = RunStore(tmp_path)
    assert list(run_table(store)["state"]) == ["damaged"]
    assert run_table(store, hide_unstepped=True)["state"].tolist() == ["damaged"]

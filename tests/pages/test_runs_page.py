"""The Runs page: live progress with Stop, rows clicked to select runs, tags and filters, empty runs last."""

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard.runs_table import picked_runs, rows_of
from gaccum_core.config import RunConfig
from gaccum_core.states import RunState

ROOT = Path(__file__).resolve().parents[2]
RUNS = str(ROOT / "app_pages/2_Runs.py")
CONFIG = RunConfig(device="cpu", model="mlp", micro_batch_size=8, accum_steps=2, max_steps=8)
WAIT_S = 120


def _runner():
    from dashboard import server

    return server.get_runner()


def runs_page() -> AppTest:
    return AppTest.from_file(RUNS, default_timeout=60).run()


def _table(at: AppTest):
    return at.dataframe(key="runs_table").value


def _bars(at: AppTest) -> list[str]:
    return [p.proto.text for p in at.get("progress")]


def _finished(*names: str) -> list[str]:
    runner = _runner()
    ids = [runner.submit(CONFIG.replace(max_steps=2, seed=i), name=name) for i, name in enumerate(names)]
    assert all(runner.wait(run_id, timeout=WAIT_S).state == RunState.FINISHED for run_id in ids)
    return ids


def _click_rows(at: AppTest, rows: list[int]) -> AppTest:
    """What a click in the table sends: its selected rows (AppTest has no click for a dataframe)."""
    at.session_state["runs_table"] = {"selection": {"rows": rows, "columns": [], "cells": []}}
    return at.run()


def test_a_run_resumed_on_the_runs_page_shows_its_progress_and_ends_finished(runs_dir, gate):
    runner = _runner()
    gate.hold(step=3, micro=1)
    run_id = runner.submit(CONFIG)
    gate.wait_until_held()
    runner.stop(run_id)
    gate.release()
    assert runner.wait(run_id, timeout=WAIT_S).state == RunState.STOPPED
    at = runs_page()
    at.multiselect(key="runs_selected").select(run_id).run()
    gate.hold(step=6)  # the resumed run is held mid-way, while the page is open
    at.button(key=f"resume_{run_id}").click().run()
    gate.wait_until_held()
    at.run()  # what the page's refresh does every second
    assert not at.exception
    assert any("running: step 5 of 8" in text for text in _bars(at)), _bars(at)
    assert _table(at).set_index("run_id").loc[run_id, "state"] == "running"
    assert [b for b in at.button if b.key == f"stop_{run_id}"]
    gate.release()
    assert runner.wait(run_id, timeout=WAIT_S).state == RunState.FINISHED
    at.run()
    assert not at.exception
    row = _table(at).set_index("run_id").loc[run_id]
    assert row["state"] == "finished" and row["steps"] == 8 and row["progress"] == 1.0
    assert any("finished: step 8 of 8" in text for text in _bars(at)), _bars(at)
    assert not [b for b in at.button if b.key == f"stop_{run_id}"]
    assert any(f"{run_id} (finished" in option for option in at.multiselect(key="runs_selected").options)


def test_stop_on_the_runs_page_stops_a_running_run(runs_dir, gate):
    runner = _runner()
    gate.hold(step=2)
    run_id = runner.submit(CONFIG)
    gate.wait_until_held()
    at = runs_page()
    assert any("running: step 1 of 8" in text for text in _bars(at)), _bars(at)
    at.button(key=f"stop_{run_id}").click().run()
    gate.release()
    snapshot = runner.wait(run_id, timeout=WAIT_S)
    assert snapshot.state == RunState.STOPPED and snapshot.message == "stopped by the user"
    at.run()
    assert not at.exception
    assert _table(at).set_index("run_id").loc[run_id, "state"] == "stopped"
    assert not [b for b in at.button if b.key == f"stop_{run_id}"]


def test_the_selection_after_a_click_keeps_the_runs_a_filter_hides():
    shown = ["c", "b", "a"]
    assert picked_runs(["x", "b"], shown, [0, 2]) == ["x", "c", "a"]
    assert picked_runs(["x", "b"], shown, []) == ["x"]
    assert picked_runs([], shown, [5]) == []  # a row the table no longer has
    assert rows_of(["a", "x", "c"], shown) == [0, 2]


def test_clicking_rows_selects_runs_in_step_with_the_multiselect(runs_dir):
    _finished("first", "second")
    at = runs_page()
    second, first = _table(at)["run_id"]  # as the table lists them (newest first, by id)
    assert not at.subheader  # nothing selected: nothing to compare
    _click_rows(at, [1])
    assert not at.exception
    assert at.multiselect(key="runs_selected").value == [first]
    assert [s.value for s in at.subheader][:2] == ["Tags", "Settings"]
    at.multiselect(key="runs_selected").select(second).run()
    assert at.session_state["runs_table"]["selection"]["rows"] == [0, 1]  # the table shows both selected
    assert "Charts" in [s.value for s in at.subheader] and not at.exception
    _click_rows(at, [0])  # unselect the first run's row
    assert at.multiselect(key="runs_selected").value == [second]


def test_a_run_linked_by_its_id_is_selected_in_the_table(runs_dir):
    first, _ = _finished("first", "second")
    at = AppTest.from_file(RUNS, default_timeout=60)
    at.query_params["run"] = first
    at.run()
    assert at.multiselect(key="runs_selected").value == [first]
    assert at.session_state["runs_table"]["selection"]["rows"] == [list(_table(at)["run_id"]).index(first)]


def test_runs_linked_together_are_selected_together_and_a_missing_one_is_named(runs_dir):
    first, second = _finished("first", "second")
    at = AppTest.from_file(RUNS, default_timeout=60)
    at.query_params["run"] = f"{first},20990101-000000-abcdef,{second}"
    at.run()
    assert not at.exception
    assert at.multiselect(key="runs_selected").value == [first, second]
    assert any("No run '20990101-000000-abcdef'" in w.value for w in at.warning)


def test_tags_are_saved_shown_and_filter_the_table_and_a_bad_tag_is_named(runs_dir):
    first, second = _finished("first", "second")
    at = runs_page()
    _click_rows(at, [0, 1])
    at.text_input(key=f"tags_{first}").input("baseline, sgd").run()
    assert not at.exception
    assert _runner().store.read_tags(first) == ["baseline", "sgd"]
    assert list(_table(at).set_index("run_id").loc[first, "tags"]) == ["baseline", "sgd"]
    assert at.multiselect(key="runs_filter_tags").options == ["baseline", "sgd"]
    at.multiselect(key="runs_filter_tags").select("baseline").run()
    assert list(_table(at)["run_id"]) == [first]
    assert set(at.multiselect(key="runs_selected").value) == {first, second}  # a filter hides, never unselects
    at.multiselect(key="runs_filter_tags").unselect("baseline").run()
    at.text_input(key=f"tags_{second}").input("bf16 try").run()
    assert any(f"Tags of {second} not saved: tags: 'bf16 try' is not allowed" in e.value for e in at.error)
    assert _runner().store.read_tags(second) == []
    at.text_input(key="runs_filter_text").input("SECOND").run()
    assert list(_table(at)["run_id"]) == [second]
    at.text_input(key="runs_filter_text").input("").run()
    at.multiselect(key="runs_filter_states").select("finished").run()
    assert set(_table(at)["run_id"]) == {first, second}


def test_runs_that_ended_before_their_first_step_are_listed_last(runs_dir):
    (finished,) = _finished("done")
    store = _runner().store
    empty = store.create(CONFIG, name="stopped at once")
    store.update_status(empty, state="stopped", message="stopped before its first step")
    at = runs_page()
    assert list(_table(at)["run_id"]) == [finished, empty]  # the newer, empty one after
    assert any("ended before a first step" in c.value for c in at.caption)


@pytest.mark.parametrize("state", ["stopped", "failed"])
def test_an_empty_run_can_still_be_selected_and_deleted(runs_dir, state):
    store = _runner().store
    empty = store.create(CONFIG)
    store.update_status(empty, state=state, message="stopped before its first step")
    at = runs_page()
    _click_rows(at, [0])
    at.checkbox(key="confirm_delete").check().run()
    at.button(key="delete_run").click().run()
    assert not at.exception and not (runs_dir / empty).exists()


def test_the_runs_pages_legends_name_runs_by_their_names_never_by_the_end_of_their_ids(runs_dir):
    import json

    fp16, bf16 = _finished("fp16 try 1", "bf16 try 1")
    at = runs_page()
    _click_rows(at, [0, 1])
    loss = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if "loss" in c.proto.spec)
    legends = {trace.get("name", "") for trace in loss["data"]}
    assert any("fp16 try 1" in name for name in legends) and any("bf16 try 1" in name for name in legends)
    assert not any("-try-1" in name for name in legends), legends  # both ids end so


def _two_process_run(store, config: RunConfig, reduce_scatters: int, allreduces: int, grad_kept_mb: float) -> str:
    """A finished 2-process run on disk, its rows written by hand (what the engine records per step)."""
    run_id = store.create(config)
    writer = store.writer(run_id)
    for step in (1, 2, 3):
        writer.log_step({"step": step, "epoch": 0, "micro_batches": 4, "samples": 64, "samples_seen": 64 * step,
                         "loss": 2.0 / step, "lr": 0.05, "grad_norm": 1.0, "skipped": 0, "skipped_total": 0,
                         "activation_mb": 0.01, "cache_clear_s": 0.0, "step_time_s": 0.1, "samples_per_s": 640.0,
                         "wall_time_s": 0.1 * step, "world_size": 2, "allreduce_calls": allreduces,
                         "allreduce_bytes": allreduces * 35000, "reduce_scatter_calls": reduce_scatters,
                         "reduce_scatter_bytes": reduce_scatters * 12000, "all_gather_calls": 2 * reduce_scatters,
                         "all_gather_bytes": 24000 * reduce_scatters, "weights_mb": 0.03, "gradients_mb": grad_kept_mb,
                         "optimizer_mb": 0.03, "train_mem_mb": 0.07 + grad_kept_mb, "grad_kept_mb": grad_kept_mb})
    writer.close()
    store.update_status(run_id, state="finished", message="")
    return run_id


def test_the_runs_page_draws_collectives_and_memory_per_rank_of_ddp_and_fsdp_runs(runs_dir):
    """A ddp and an fsdp/every run selected: the collectives chart and the per-rank memory chart, legends by
    what differs (ddp, fsdp/every), no 'does not apply' line for collectives."""
    store = _runner().store
    ddp = CONFIG.replace(nproc=2)
    ids = [_two_process_run(store, ddp, 0, 1, 0.034), _two_process_run(store, ddp.replace(sharding="fsdp"), 12, 0, 0.017)]
    at = runs_page()
    at.multiselect(key="runs_selected").set_value(ids).run()
    assert not at.exception
    charts = {chart.key.removeprefix("runs_chart_"): chart for chart in at.get("plotly_chart")}
    assert "collectives" in charts and "memory" in charts
    assert not any("Collectives" in c.value for c in at.caption)
    collectives = json.loads(charts["collectives"].proto.spec)
    assert {t["name"] for t in collectives["data"] if t.get("showlegend")} >= {"mlp b=8 k=2 N=2 ddp",
                                                                               "mlp b=8 k=2 N=2 fsdp/every"}
    memory = json.loads(charts["memory"].proto.spec)
    assert "per rank" in memory["layout"]["title"]["text"]


def test_past_the_runs_offered_the_table_picks_any_run(runs_dir, monkeypatch):
    """With more runs than the multiselect offers (OFFERED, 2 here), the table's first are offered and a caption
    says so; a click on a later row picks that run all the same."""
    from dashboard import run_picks
    from gaccum_core.runs.store import RunStore

    monkeypatch.setattr(run_picks, "OFFERED", 2)
    store = RunStore(runs_dir)
    monkeypatch.setattr(store, "new_run_id", lambda name=None: f"20260101-0000{len(store.list_runs()):02d}-abcdef")
    for seed in range(3):
        store.create(CONFIG.replace(seed=seed))
    at = runs_page()
    ids = list(_table(at)["run_id"])
    offered = at.multiselect(key="runs_selected").options
    assert len(ids) == 3 and len(offered) == 2 and all(o.startswith(r) for o, r in zip(offered, ids))
    assert any("first 2 of 3 runs" in c.value for c in at.caption), [c.value for c in at.caption]
    _click_rows(at, [2])
    assert not at.exception
    assert at.multiselect(key="runs_selected").value == [ids[2]]
    assert len(at.multiselect(key="runs_selected").options) == 3  # the picked one offered too

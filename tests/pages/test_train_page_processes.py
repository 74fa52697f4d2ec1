"""The Train page's Processes control: a data-parallel run from the page, and values the machine cannot run."""

import os
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from gaccum_core.states import RunState

TRAIN = str(Path(__file__).resolve().parents[2] / "app_pages/1_Train.py")


def _runner():
    from dashboard import ui

    return ui.get_runner()


def _page() -> AppTest:
    at = AppTest.from_file(TRAIN, default_timeout=120).run()
    at.selectbox(key="cfg_model").select("mlp")
    at.number_input(key="cfg_micro_batch_size").set_value(8)
    at.number_input(key="cfg_accum_steps").set_value(2)
    return at.run()


@pytest.mark.multiprocess
def test_two_processes_from_the_train_page_train_one_run_of_effective_batch_n_b_k(runs_dir):
    """N=2: the page shows N·b·k, Start runs DDP under torchrun, every row says world size 2."""
    at = _page()
    at.number_input(key="cfg_nproc").set_value(2).run()
    assert [m.value for m in at.metric if m.label == "Effective batch N·b·k"] == ["32"]
    assert at.checkbox(key="cfg_sync_every_micro_batch").value is False
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    snapshot = _runner().wait(run_id, timeout=300)
    assert snapshot.state == RunState.FINISHED, snapshot.message
    assert {row["world_size"] for row in snapshot.metrics} == {2}
    assert all(row["samples"] <= 32 for row in snapshot.metrics) and snapshot.metrics[0]["samples"] == 32
    assert snapshot.config.nproc == 2 and snapshot.config.effective_batch_size == 32


def test_more_processes_than_cores_is_refused_under_the_control(runs_dir):
    """N above the core count (no GPU here): Start is disabled and the message names the control and the limit."""
    at = _page()
    at.number_input(key="cfg_nproc").set_value((os.cpu_count() or 1) + 1).run()
    assert at.button(key="start").disabled
    messages = [e.value for e in at.error]
    assert any("Processes N (data-parallel)" in m and f"1 to {os.cpu_count()}" in m for m in messages), messages

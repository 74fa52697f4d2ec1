"""The Train page's activation checkpointing control (AppTest): beside the micro-batch, with what it costs; the
block interval only for selective; the run started gets the setting."""

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from gaccum_core.states import RunState

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)


def test_checkpointing_is_set_beside_the_micro_batch_and_reaches_the_run(runs_dir):
    from dashboard import server

    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / "app_pages/1_Train.py"), default_timeout=120).run()
    assert at.radio(key="cfg_activation_checkpointing").value == "off"
    assert "cfg_ac_every" not in [n.key for n in at.number_input]
    at.radio(key="cfg_activation_checkpointing").set_value("selective").run()
    assert at.number_input(key="cfg_ac_every").value == 2
    assert any("recomputes its activations" in c.value for c in at.sidebar.caption)
    at.radio(key="cfg_activation_checkpointing").set_value("full").run()
    at.number_input(key="cfg_max_steps").set_value(2).run()
    assert not at.exception and not at.sidebar.error, [e.value for e in at.sidebar.error]
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    runner = server.get_runner()
    assert runner.wait(run_id, timeout=120).state == RunState.FINISHED
    assert runner.config(run_id).activation_checkpointing == "full"

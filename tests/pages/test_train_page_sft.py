"""The Train page for sft (AppTest): the dataset offered, its fields' and loss aggregation's controls generated from
their metadata, pg's group-mean-token-mean refused under its control with Start off."""

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from test_train_page_language import under

TRAIN = str(Path(__file__).resolve().parents[2] / "app_pages/1_Train.py")

pytestmark = pytest.mark.timeout(300)


def test_sft_shows_its_generated_controls_and_refuses_a_mode_of_pg(runs_dir, token_cache_dir):
    st.cache_data.clear()
    at = AppTest.from_file(TRAIN, default_timeout=120).run()
    at.selectbox(key="cfg_model").select("gpt").run()
    at.selectbox(key="cfg_dataset").select("sft").run()
    assert not at.exception and not at.sidebar.error, [e.value for e in at.sidebar.error]
    assert at.text_input(key="cfg_prompt_field").value == "prompt"
    assert at.text_input(key="cfg_completion_field").value == "completion"
    assert not at.button(key="start").disabled
    at.selectbox(key="cfg_loss_agg").select("group-mean-token-mean").run()
    assert "no prompt groups" in (under(at, "cfg_loss_agg") or "") and at.button(key="start").disabled

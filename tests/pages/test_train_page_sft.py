"""The Train page for sft and pg (AppTest): the data sets offered, where their records come from (bundled by default, a
.jsonl or a saved data set's folder), their fields' and loss aggregation's controls generated from their metadata
where they apply (C for seq-mean-token-sum-norm), group-mean-token-mean offered for pg alone, and reduction sum with
another mode refused in one line with Start off; under a pg run's charts, the C it used and what its tokens count.
The Equivalence page draws the records' settings and aggregation too, the Plan page their settings."""

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from gaccum_core.config import LOSS_AGGS, RunConfig
from gaccum_core.execution.runner import Runner
from gaccum_core.states import RunState
from gaccum_core.train import engine
from gaccum_core.views.axes import LOSS_TOKENS_NOTE
from test_train_page_language import under

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)


def _records(at: AppTest, prefix: str, dataset: str) -> AppTest:
    at.selectbox(key=f"{prefix}model").select("gpt").run()
    return at.selectbox(key=f"{prefix}dataset").select(dataset).run()


def test_pg_and_sft_show_their_generated_controls_and_offer_their_own_modes(runs_dir, token_cache_dir):
    st.cache_data.clear()
    at = _records(AppTest.from_file(str(ROOT / "app_pages/1_Train.py"), default_timeout=120).run(), "cfg_", "pg")
    assert not at.exception and not at.sidebar.error, [e.value for e in at.sidebar.error]
    assert (at.text_input(key="cfg_text_file").value, at.text_input(key="cfg_data_dir").value) == ("", "data")
    assert "Reads the bundled pg records (nothing downloaded)." in [c.value for c in at.sidebar.caption]
    assert [at.text_input(key=f"cfg_{name}_field").value for name in ("prompt", "completion", "advantage", "group")] \
        == ["prompt", "completion", "advantage", "group"]
    assert "group-mean-token-mean" in at.selectbox(key="cfg_loss_agg").options
    at.selectbox(key="cfg_loss_agg").select("group-mean-token-mean").run()
    at.selectbox(key="cfg_dataset").select("sft").run()  # pg's mode is not sft's: the first offered instead
    loss_agg = at.selectbox(key="cfg_loss_agg")
    assert "group-mean-token-mean" not in loss_agg.options and loss_agg.value == "token-mean"
    assert not at.sidebar.error
    assert "cfg_advantage_field" not in [w.key for w in at.sidebar.text_input]
    assert "cfg_loss_agg_norm" not in [w.key for w in at.sidebar.number_input]
    at.selectbox(key="cfg_loss_agg").select("seq-mean-token-sum-norm").run()
    assert at.number_input(key="cfg_loss_agg_norm").value == 0  # C appears where it applies
    at.radio(key="cfg_reduction").set_value("sum").run()
    refused = "Loss aggregation = 'seq-mean-token-sum-norm' is not allowed: token-mean with reduction sum"
    assert (under(at, "cfg_loss_agg") or "").startswith(refused)  # under its control, and in one line above Start
    assert [e.value for e in at.main.error] == [f"Cannot start: {under(at, 'cfg_loss_agg')}"]
    assert at.button(key="start").disabled


@pytest.mark.parametrize("page, prefix", [("3_Equivalence", "eq_"), ("5_Plan", "plan_")])
def test_the_equivalence_and_plan_pages_take_the_records_settings(runs_dir, token_cache_dir, page, prefix):
    at = _records(AppTest.from_file(str(ROOT / f"app_pages/{page}.py"), default_timeout=120).run(), prefix, "pg")
    assert not at.exception and not at.error, [e.value for e in at.error]
    keys = {w.key.removeprefix(prefix) for w in at.text_input}
    assert {"text_file", "data_dir", "prompt_field", "completion_field", "advantage_field", "group_field"} <= keys
    selects = {w.key.removeprefix(prefix): w for w in at.selectbox}
    if prefix == "eq_":  # compared as the run weighs it
        assert list(selects["loss_agg"].options) == list(LOSS_AGGS)
    else:  # the planner's flag, not the Plan page's
        assert "loss_agg" not in selects


def test_a_pg_runs_charts_say_its_constant_c_and_that_tokens_are_loss_tokens(runs_dir, token_cache_dir, monkeypatch):
    monkeypatch.setattr(engine, "sample_text", lambda *args: "")
    runner = Runner(runs_dir, executor="thread")
    config = RunConfig(model="gpt", dataset="pg", loss_agg="seq-mean-token-sum-norm", max_steps=1, max_seq_len=32,
                       micro_batch_size=2, accum_steps=2, eval_batches=1, device="cpu", tensorboard="off")
    run_id = runner.submit(config)
    assert runner.wait(run_id, timeout=120).state == RunState.FINISHED
    used = runner.store.read_status(run_id)["loss_agg_norm"]
    runner.store.update_status(run_id, state=RunState.STOPPED)  # the run a fresh tab shows: the newest stopped one
    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / "app_pages/1_Train.py"), default_timeout=120).run()
    captions = [c.value for c in at.main.caption]
    assert f"seq-mean-token-sum-norm divides by C = {used}, the longest completion in the training split." in captions
    assert 0 < used <= 32 and LOSS_TOKENS_NOTE in captions

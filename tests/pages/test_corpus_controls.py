"""The text data sets' controls on the Train, Plan and Equivalence pages (AppTest): each data set shows the
settings it reads — a text corpus its files, field, cache folder and packing; a tokens folder its id width and
no packing (packed by nature); an hf-dataset folder its field and cache folder — and the next run gets them."""

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from gaccum_core.states import RunState

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"cfg_": "app_pages/1_Train.py", "plan_": "app_pages/5_Plan.py", "eq_": "app_pages/3_Equivalence.py"}
SHOWN = {  # the data set -> the text controls it shows (besides the sequence length and gpt's size)
    "pydoc": {"packing"},
    "text": {"text_file", "text_field", "text_file_max_mb", "cache_dir", "packing"},
    "tokens": {"data_dir", "token_dtype"},
    "hf-dataset": {"data_dir", "text_field", "cache_dir", "packing"},
}
CORPUS_FIELDS = {"text_file", "text_field", "text_file_max_mb", "cache_dir", "packing", "data_dir", "token_dtype"}

pytestmark = pytest.mark.timeout(300)


def _keys(at: AppTest, prefix: str) -> set[str]:
    """The corpus fields the page shows a control for."""
    shown = set()
    for kind in ("text_input", "number_input", "radio", "selectbox"):
        for element in getattr(at, kind):
            if element.key and element.key.startswith(prefix) and element.key[len(prefix):] in CORPUS_FIELDS:
                shown.add(element.key[len(prefix):])
    return shown


@pytest.mark.parametrize("prefix", PAGES)
def test_each_text_data_set_shows_the_settings_it_reads(prefix):
    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / PAGES[prefix]), default_timeout=120).run()
    at.selectbox(key=f"{prefix}model").select("gpt").run()
    for dataset, expected in SHOWN.items():
        at.selectbox(key=f"{prefix}dataset").select(dataset).run()
        assert not at.exception, [e.value for e in at.exception]
        assert _keys(at, prefix) == expected, dataset


def test_a_packed_run_from_the_train_page_holds_full_sequences(runs_dir):
    from dashboard import server

    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / PAGES["cfg_"]), default_timeout=120).run()
    at.selectbox(key="cfg_model").select("gpt").run()
    at.selectbox(key="cfg_dataset").select("pydoc").run()
    at.radio(key="cfg_packing").set_value("on").run()
    for key, value in {"cfg_max_seq_len": 32, "cfg_micro_batch_size": 4, "cfg_accum_steps": 2, "cfg_max_steps": 3,
                       "cfg_eval_every": 3, "cfg_eval_batches": 2}.items():
        at.number_input(key=key).set_value(value).run()
    assert not at.exception and not at.sidebar.error, [e.value for e in at.sidebar.error]
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    runner = server.get_runner()
    assert runner.wait(run_id, timeout=120).state == RunState.FINISHED
    config = runner.config(run_id)
    assert config.packing == "on" and config.eval_batches == 2
    # Packed: every micro-batch of every window holds b full sequences of max_seq_len targets.
    assert [row["tokens"] for row in runner.snapshot(run_id).metrics] == [2 * 4 * 32] * 3


def test_the_equivalence_page_tokenises_a_new_corpus_aside_then_compares(runs_dir, token_cache_dir, tmp_path,
                                                                         monkeypatch):
    from gaccum_core.data import token_cache

    def not_here(*args, **kwargs):
        raise AssertionError("a corpus tokenised in the server's process")

    monkeypatch.setattr(token_cache, "tokenise", not_here)  # this process may read the cache, never build it
    corpus = tmp_path / "notes.jsonl"
    corpus.write_text("".join(f'{{"text": "note {i}: {"accumulate the gradient, then step. " * (i % 5 + 1)}"}}\n'
                              for i in range(60)), encoding="utf-8")
    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / PAGES["eq_"]), default_timeout=240).run()
    at.selectbox(key="eq_model").select("gpt").run()
    at.selectbox(key="eq_dataset").select("text").run()
    at.text_input(key="eq_text_file").input(str(corpus)).run()
    at.number_input(key="eq_max_seq_len").set_value(16).run()
    at.number_input(key="eq_steps").set_value(2).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert not any(token_cache_dir.iterdir())  # the page's checks tokenise nothing in the server
    at.button(key="eq_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.session_state["eq_report"].equal
    (cache,) = [d for d in token_cache_dir.iterdir() if d.is_dir()]  # built once, by the worker process
    assert (cache / "train.bin").is_file() and cache.name.startswith("notes.jsonl-")

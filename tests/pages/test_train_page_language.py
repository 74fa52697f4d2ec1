"""The Train page for language runs (AppTest): gpt on pydoc started from the page, its tokens-seen axis,
tokens/s and perplexity charts and generated text; the text controls; bad text settings named under
their control with Start disabled; the textbook reduction offered for what it is."""

import base64
from pathlib import Path

import numpy as np
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.element_tree import Block

from page_charts import live_figures

from gaccum_core.states import RunState
from gaccum_core.views.samples import readable_sample

ROOT = Path(__file__).resolve().parents[2]
TRAIN = str(ROOT / "app_pages/1_Train.py")
SMALL = {"cfg_max_seq_len": 32, "cfg_micro_batch_size": 4, "cfg_accum_steps": 2, "cfg_max_steps": 6,
         "cfg_eval_every": 3}

pytestmark = pytest.mark.timeout(300)


def runner():
    from dashboard import server

    return server.get_runner()


def train_page() -> AppTest:
    st.cache_data.clear()  # the page remembers settings (and descriptions) that passed, across AppTests
    return AppTest.from_file(TRAIN, default_timeout=120).run()


def set_values(at: AppTest, values: dict) -> None:
    """Set controls by key, each followed by a rerun (a control may appear only after another's value)."""
    for key, value in values.items():
        if key in ("cfg_model", "cfg_dataset", "cfg_gpt_preset"):
            at.selectbox(key=key).select(value)
        elif key == "cfg_text_file":
            at.text_input(key=key).input(value)
        else:
            at.number_input(key=key).set_value(value)
        at.run()
        assert not at.exception, [e.value for e in at.exception]


def sidebar_leaves(at: AppTest) -> list:
    return [node for node in at.sidebar if not isinstance(node, Block)]


def under(at: AppTest, key: str) -> str | None:
    """The error shown right under the control with this key, or None."""
    leaves = sidebar_leaves(at)
    (index,) = [i for i, node in enumerate(leaves) if getattr(node, "key", None) == key]
    following = leaves[index + 1] if index + 1 < len(leaves) else None
    return following.value if following is not None and following.type == "error" else None


def values(array) -> list:
    """A plotly JSON array as a list: plotly ships numpy arrays base64-encoded."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)


def test_a_gpt_run_on_pydoc_from_the_page_charts_tokens_and_shows_its_generated_text(runs_dir, downloads):
    at = train_page()
    set_values(at, {"cfg_model": "gpt", "cfg_dataset": "pydoc", **SMALL})
    assert not at.sidebar.error and not at.button(key="start").disabled
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    assert runner().wait(run_id, timeout=120).state == RunState.FINISHED
    at.run()
    assert not at.exception, [e.value for e in at.exception]

    rows = runner().snapshot(run_id).metrics
    assert len(rows) == 6 and all(row["tokens"] > 0 for row in rows)
    tokens_seen = [row["tokens_seen"] for row in rows]
    assert tokens_seen == list(np.cumsum([row["tokens"] for row in rows]))
    stored = runner().store.read_metrics(run_id)
    assert stored["tokens"].tolist() == [row["tokens"] for row in rows]

    figures = live_figures(at)
    assert {"loss", "accuracy", "perplexity", "throughput"} <= set(figures)
    throughput = figures["throughput"]
    assert throughput["layout"]["yaxis"]["title"]["text"] == "tokens/s"
    assert values(throughput["data"][0]["y"]) == pytest.approx([row["tokens_per_s"] for row in rows])
    assert figures["accuracy"]["layout"]["title"]["text"] == "validation token accuracy"
    (perplexity,) = figures["perplexity"]["data"]
    assert values(perplexity["x"]) == [3, 6] and all(p > 1 for p in values(perplexity["y"]))

    x_axis = at.radio(key="chart_x")
    assert "tokens seen" in x_axis.options
    x_axis.set_value("tokens_seen").run()
    figures = live_figures(at)
    loss = figures["loss"]
    assert loss["layout"]["xaxis"]["title"]["text"] == "tokens seen"
    assert values(loss["data"][1]["x"]) == tokens_seen
    assert values(figures["perplexity"]["data"][0]["x"]) == [tokens_seen[2], tokens_seen[5]]

    samples = runner().store.samples(run_id)
    assert [s["step"] for s in samples] == [3, 6] and samples[-1]["text"].startswith("The ")
    main = [node for node in at.main if not isinstance(node, Block)]
    last_chart = max(i for i, node in enumerate(main) if node.type == "bidi_component")
    codes = [(i, node.value) for i, node in enumerate(main) if node.type == "code"]
    latest = [i for i, text in codes if text == f"step 6: {readable_sample(samples[-1]['text'])}"]
    assert latest and latest[0] > last_chart, "the latest sample is not shown under the charts"
    every = [text for _, text in codes if text.startswith("step 3: ")]
    assert every and every[0].splitlines()[1].startswith("step 6: "), codes  # every sample, by step
    assert any(e.label == "Every sample of this run, by step" for e in at.expander)
    assert "perplexity" in downloads[f"{run_id}-eval.csv"].decode().splitlines()[0]


def test_an_image_run_shows_no_text_and_offers_no_tokens_axis(runs_dir):
    at = train_page()
    set_values(at, {"cfg_model": "mlp", "cfg_max_steps": 2})
    assert "tokens seen" not in at.radio(key="chart_x").options
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    assert runner().wait(run_id, timeout=120).state == RunState.FINISHED
    at.run()
    assert "perplexity" not in live_figures(at)
    assert not any("Generated text" in m.value for m in at.markdown)
    assert [e.label for e in at.expander] == ["The loop you are running"]


def test_text_data_sets_show_the_text_controls_instead_of_the_image_ones(runs_dir, tmp_path):
    at = train_page()
    keys = {getattr(node, "key", None) for node in sidebar_leaves(at)}
    assert "cfg_image_size" in keys and not keys & {"cfg_max_seq_len", "cfg_gpt_preset", "cfg_text_file"}
    set_values(at, {"cfg_model": "gpt", "cfg_dataset": "pydoc"})
    keys = {getattr(node, "key", None) for node in sidebar_leaves(at)}
    assert {"cfg_max_seq_len", "cfg_gpt_preset"} <= keys
    assert not keys & {"cfg_image_size", "cfg_fake_samples", "cfg_data_dir", "cfg_download", "cfg_text_file"}
    assert at.number_input(key="cfg_max_seq_len").label == "Sequence length (tokens)"
    preset = at.selectbox(key="cfg_gpt_preset")
    assert preset.label == "GPT size"
    assert preset.options == ["tiny · 0.13 M parameters", "mini · 0.89 M parameters", "small · 11.1 M parameters",
                              "gpt2 · 86 M parameters"]
    captions = [c.value for c in at.sidebar.caption]
    assert any(c.startswith("gpt tiny: 0.13 M parameters") and "256 tokens" in c for c in captions), captions
    assert any(c.startswith("pydoc: ") and "sequences of up to 128 tokens" in c for c in captions), captions

    notes = tmp_path / "notes.txt"
    notes.write_text("\n\n".join(f"Paragraph {i}: " + "words " * (5 + 3 * i) for i in range(12)), encoding="utf-8")
    set_values(at, {"cfg_dataset": "text", "cfg_text_file": str(notes), "cfg_micro_batch_size": 4})
    assert at.text_input(key="cfg_text_file").label == "Text file"
    assert any(c.value.startswith("text: ") for c in at.sidebar.caption), [e.value for e in at.sidebar.error]
    assert not at.sidebar.error and not at.button(key="start").disabled, [e.value for e in at.sidebar.error]


@pytest.fixture
def bad_files(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("files")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00abc\n\nxyz")
    return tmp_path


@pytest.mark.parametrize("setup,key,words", [
    ({"cfg_model": "gpt"}, "cfg_dataset", ["Dataset = 'digits' is not allowed", "pick pydoc", "or text"]),
    ({"cfg_dataset": "pydoc"}, "cfg_model", ["Model = 'cnn' is not allowed", "gpt"]),
    ({"cfg_model": "gpt", "cfg_dataset": "pydoc", "cfg_max_seq_len": 300}, "cfg_max_seq_len",
     ["Sequence length (tokens) = 300 is not allowed", "256", "larger GPT size"]),
    ({"cfg_model": "gpt", "cfg_dataset": "text"}, "cfg_text_file", ["Text file is empty: choose the path of a UTF-8 text"]),
    ({"cfg_model": "gpt", "cfg_dataset": "text", "cfg_text_file": "{tmp}/missing.txt"}, "cfg_text_file",
     ["Text file = '{tmp}/missing.txt' is not allowed", "no such file"]),
    ({"cfg_model": "gpt", "cfg_dataset": "text", "cfg_text_file": "{tmp}/binary.txt"}, "cfg_text_file",
     ["Text file = ", "UTF-8"]),
    ({"cfg_model": "gpt", "cfg_dataset": "text", "cfg_text_file": "{tmp}/empty.txt"}, "cfg_text_file",
     ["Text file = ", "at least 2 paragraphs"]),
    ({"cfg_model": "gpt", "cfg_dataset": "text", "cfg_text_file": "{tmp}"}, "cfg_text_file",
     ["Text file = ", "directory"]),
], ids=["gpt-on-images", "image-model-on-text", "too-long", "no-file", "missing-file", "not-utf8", "empty-file",
        "a-directory"])
def test_a_bad_language_setting_is_named_under_its_control_and_start_is_disabled(runs_dir, bad_files, setup, key,
                                                                                 words):
    at = train_page()
    set_values(at, {k: v.replace("{tmp}", str(bad_files)) if isinstance(v, str) else v for k, v in setup.items()})
    assert not at.exception
    message = under(at, key)
    assert message is not None, (key, [e.value for e in at.sidebar.error])
    for word in words:
        assert word.replace("{tmp}", str(bad_files)).lower() in message.lower(), (word, message)
    assert at.button(key="start").disabled
    assert "Traceback" not in message and not list(runs_dir.iterdir())


def test_the_textbook_reduction_is_offered_for_what_it_is(runs_dir):
    at = train_page()
    set_values(at, {"cfg_model": "gpt", "cfg_dataset": "pydoc", **SMALL})
    reduction = at.radio(key="cfg_reduction")
    assert reduction.options == ["mean (exact)", "sum", "mean per micro-batch (textbook, not exact)"]
    assert "NOT exact" in reduction.help
    reduction.set_value("mean_per_micro_batch").run()
    assert at.radio(key="cfg_reduction").value == "mean_per_micro_batch"
    assert any("Not exact" in c.value for c in at.sidebar.caption)
    assert not at.sidebar.error and not at.button(key="start").disabled
    assert "ignore_index=-100) / accum_steps" in at.code[-1].value  # the loop shown is the textbook one


def test_against_tokens_seen_an_overlaid_image_run_is_left_out_and_the_page_says_so(runs_dir):
    from gaccum_core.config import RunConfig

    image = runner().submit(RunConfig(device="cpu", model="mlp", max_steps=2), "pictures")
    text = runner().submit(RunConfig(device="cpu", model="gpt", dataset="pydoc", max_seq_len=16, micro_batch_size=8,
                                     accum_steps=1, max_steps=2, eval_every=2), "words")
    for run_id in (image, text):
        assert runner().wait(run_id, timeout=120).state == RunState.FINISHED
    at = AppTest.from_file(TRAIN, default_timeout=120)
    at.session_state["session_runs"] = [image, text]
    at.session_state["_keep_chart_overlay"] = [image]
    at.session_state["_keep_chart_x"] = "tokens_seen"
    at.run()
    assert not at.exception
    notes = [c.value for c in at.caption if c.value.startswith("Not drawn against tokens seen")]
    assert len(notes) == 1 and "pictures" in notes[0] and "words" not in notes[0], notes
    figures = live_figures(at)
    assert all(trace["legendgroup"] == text for trace in figures["loss"]["data"])
    at.radio(key="chart_x").set_value("step").run()
    assert not any(c.value.startswith("Not drawn") for c in at.caption)
    assert {trace["legendgroup"] for trace in live_figures(at)["loss"]["data"]} == {image, text}
    (heading,) = [m.value for m in at.markdown if "Generated text" in m.value]  # the language run's only
    assert heading.startswith("**Generated text** · gpt-tiny b=8 k=1") and heading.endswith(" · words")

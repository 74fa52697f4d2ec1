"""Your own model and data set on the pages (AppTest): an hf:DIR model trained from the Train page to a
generated sample, where its weights come from, a bad directory refused in one line under the name
typed, your data set function typed in; the Plan and Equivalence pages taking the same names."""

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.element_tree import Block

from gaccum_core.states import RunState
from hfmodels import saved_model
from workers import close_now, wait_warm

ROOT = Path(__file__).resolve().parents[2]
OWN = "your own…"
# Paragraphs of 5 to 40 words: a few dozen chunks of up to 33 tokens.
PARAGRAPHS = [f"Paragraph {i} says " + "accumulate the gradient of every token " * (1 + i % 6) for i in range(24)]
MINE = '''
import torch
import torch.nn as nn


def build(input_shape, num_classes):
    channels, height, width = input_shape
    return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, 16), nn.ReLU(), nn.Linear(16, num_classes))


def load():
    generator = torch.Generator().manual_seed(0)
    items = [(torch.rand(1, 4, 4, generator=generator), i % 3) for i in range(30)]
    return items[:24], items[24:]
'''

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    return saved_model(tmp_path_factory, "llama")


@pytest.fixture(scope="module")
def notes(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "notes.txt"
    path.write_text("\n\n".join(PARAGRAPHS), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def mine(tmp_path_factory) -> Path:
    """A file holding your model factory (build) and your data set function (load)."""
    path = tmp_path_factory.mktemp("code") / "mine.py"
    path.write_text(MINE, encoding="utf-8")
    return path


def runner():
    from dashboard import server

    return server.get_runner()


def page(path: str) -> AppTest:
    st.cache_data.clear()  # the pages remember settings (and descriptions) that passed, across AppTests
    at = AppTest.from_file(str(ROOT / path), default_timeout=180).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def apply(at: AppTest, prefix: str, settings: dict) -> AppTest:
    """Set controls by field in order, each followed by a rerun (a control may appear only after another's)."""
    for field, value in settings.items():
        key = prefix + field
        if field in ("model", "dataset", "gpt_preset", "device"):
            at.selectbox(key=key).select(value)
        elif isinstance(value, str):
            at.text_input(key=key).input(value)
        elif isinstance(value, bool):
            at.checkbox(key=key).check() if value else at.checkbox(key=key).uncheck()
        else:
            at.number_input(key=key).set_value(value)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
    return at


def own(model: str | None = None, dataset: str | None = None) -> dict:
    """The settings that type your own model and/or data set."""
    settings = {}
    if model is not None:
        settings.update(model=OWN, own_model=model)
    if dataset is not None:
        settings.update(dataset=OWN, own_dataset=dataset)
    return settings


def leaves(container) -> list:
    return [node for node in container if not isinstance(node, Block)]


def under(at: AppTest, key: str) -> str | None:
    """The error shown right under the control with this key (sidebar or page), or None."""
    for container in (at.sidebar, at.main):
        nodes = leaves(container)
        for i, node in enumerate(nodes):
            if getattr(node, "key", None) == key:
                following = nodes[i + 1] if i + 1 < len(nodes) else None
                return following.value if following is not None and following.type == "error" else None
    raise KeyError(key)


def keys(at: AppTest) -> set:
    return {getattr(node, "key", None) for node in leaves(at.sidebar)}


def test_an_hf_model_runs_from_the_train_page_to_its_loss_rows_and_a_generated_sample(runs_dir, llama, notes):
    at = page("app_pages/1_Train.py")
    apply(at, "cfg_", own(model=f"hf:{llama}"))
    assert "Weights from model.safetensors" in [c.value for c in at.sidebar.caption]
    assert under(at, "cfg_dataset") and "Pick pydoc" in under(at, "cfg_dataset")  # images do not suit it
    apply(at, "cfg_", {"dataset": "text", "text_file": str(notes), "max_seq_len": 32, "micro_batch_size": 2,
                       "accum_steps": 2, "max_steps": 2, "eval_every": 2, "device": "cpu"})
    assert {"cfg_text_file", "cfg_max_seq_len", "cfg_no_dropout"} <= keys(at)
    assert not keys(at) & {"cfg_gpt_preset", "cfg_text_field", "cfg_image_size"}  # gpt's size is gpt's only
    assert at.checkbox(key="cfg_no_dropout").label == "Dropout off"
    assert any(c.value.startswith("text: ") and "tokenizer" in c.value for c in at.sidebar.caption), \
        [c.value for c in at.sidebar.caption]
    assert not at.sidebar.error and not at.button(key="start").disabled, [e.value for e in at.sidebar.error]

    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    assert runner().wait(run_id, timeout=150).state == RunState.FINISHED, runner().snapshot(run_id).message
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    rows = runner().snapshot(run_id).metrics
    assert [row["step"] for row in rows] == [1, 2] and all(row["tokens"] > 0 and row["loss"] > 0 for row in rows)
    (sample,) = runner().store.samples(run_id)
    assert sample["step"] == 2
    assert f"step 2: {sample['text']}" in [c.value for c in at.code]
    (heading,) = [m.value for m in at.markdown if "Generated text" in m.value]
    assert f"hf:{llama.name}" in heading.replace("\\", "")  # the directory's name, not its whole path
    assert any(f"hf:{llama.name} b=2 k=2" in p.proto.text.replace("\\", "") for p in at.get("progress"))


def test_text_settings_follow_the_model_typed_and_a_jsonl_file_asks_for_its_field(runs_dir, tmp_path_factory,
                                                                                   tmp_path):
    bare = saved_model(tmp_path_factory, "gpt2", weights=False)
    lines = tmp_path / "notes.jsonl"
    lines.write_text("".join(f'{{"body": "{p}"}}\n' for p in PARAGRAPHS), encoding="utf-8")
    at = page("app_pages/1_Train.py")
    assert at.selectbox(key="cfg_model").options[-1] == OWN
    apply(at, "cfg_", {"model": OWN})  # nothing typed yet: what to type, not every name there is
    assert under(at, "cfg_own_model") == ("Your model is empty: type timm:NAME, MODULE:FUNCTION, FILE.py:FUNCTION "
                                          "or hf:path/to/model_dir")
    assert at.button(key="start").disabled
    apply(at, "cfg_", {"own_model": f"hf:{bare}", "dataset": "text", "text_file": str(lines)})
    box = at.text_input(key="cfg_own_model")
    assert "hf:path/to/model_dir" in box.placeholder and "hf:path/to/model_dir" in box.help
    captions = [c.value for c in at.sidebar.caption]
    assert "No weights file: initialised from config.json with the run's seed" in captions, captions
    assert at.text_input(key="cfg_text_field").label == "JSON field holding the text"
    assert "cfg_gpt_preset" not in keys(at)
    apply(at, "cfg_", {"text_field": "body", "max_seq_len": 32})
    assert not at.sidebar.error and not at.button(key="start").disabled, [e.value for e in at.sidebar.error]
    apply(at, "cfg_", {"text_field": "text"})  # no line has it
    assert under(at, "cfg_text_field") is not None and at.button(key="start").disabled
    apply(at, "cfg_", {"model": "gpt"})  # the built-in language model: its size, and the same text settings
    assert {"cfg_gpt_preset", "cfg_text_file", "cfg_text_field", "cfg_max_seq_len"} <= keys(at)


@pytest.mark.parametrize("name,words", [
    ("hf:{tmp}/missing", ["no such directory"]),
    ("hf:{tmp}/empty", ["config.json"]),
    ("hf:{tmp}/empty/file.txt", ["a file, not a directory"]),
], ids=["missing", "no-config", "a-file"])
def test_a_bad_hf_directory_is_one_line_under_your_model_and_start_is_disabled(runs_dir, tmp_path, notes, name,
                                                                                  words):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "file.txt").write_text("not a model")
    at = page("app_pages/1_Train.py")
    typed = name.replace("{tmp}", str(tmp_path))
    for dataset in ({}, {"dataset": "text", "text_file": str(notes)}):  # on images, then on text
        apply(at, "cfg_", {**own(model=typed), **dataset})
        message = under(at, "cfg_own_model")
        assert message is not None, [e.value for e in at.sidebar.error]
        assert all(word in message for word in words) and typed in message, message
        assert "\n" not in message and "Traceback" not in message
        assert at.button(key="start").disabled
    assert not [c.value for c in at.sidebar.caption if "weights" in c.value]


@pytest.mark.multiprocess  # a worker process of its own
def test_your_data_set_typed_in_is_described_trains_and_a_wrong_name_is_refused_under_it(runs_dir, mine,
                                                                                         monkeypatch):
    """Allowed by GACCUM_USER_CODE (the folder of mine.py): read in the server, trained in a worker process."""
    monkeypatch.setenv("GACCUM_USER_CODE", str(mine.parent))
    monkeypatch.setenv("GACCUM_EXECUTOR", "process")
    at = page("app_pages/1_Train.py")
    assert at.selectbox(key="cfg_dataset").options[-1] == OWN
    apply(at, "cfg_", {"dataset": OWN})
    assert under(at, "cfg_own_dataset") == "Your data set is empty: type MODULE:FUNCTION or FILE.py:FUNCTION"
    apply(at, "cfg_", {"own_dataset": f"{mine}:nothing"})
    message = under(at, "cfg_own_dataset")
    assert message is not None and "a function nothing in" in message, [e.value for e in at.sidebar.error]
    assert at.button(key="start").disabled
    apply(at, "cfg_", {"own_dataset": f"{mine}:load", **own(model="mine.py:build"), "micro_batch_size": 4,
                       "accum_steps": 2, "max_steps": 2, "device": "cpu"})
    box = at.text_input(key="cfg_own_dataset")
    assert box.label == "Your data set" and "my_data.py:load" in box.placeholder
    assert (f"{mine}:load: your datasets, found in mine.py; loaded by the run's worker process on Start (the "
            "dashboard's server never runs your code)") in [c.value for c in at.sidebar.caption]
    wait_warm(runner())  # Start is enabled once the spare worker has imported torch
    at.run()
    assert not at.sidebar.error and not at.button(key="start").disabled, [e.value for e in at.sidebar.error]
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    try:
        assert runner().wait(run_id, timeout=120).state == RunState.FINISHED, runner().snapshot(run_id).message
        assert len(runner().snapshot(run_id).metrics) == 2
        assert runner().config(run_id).dataset == f"{mine}:load"
    finally:
        close_now(runner())  # and the spare warmed after the run


def plan_page() -> AppTest:
    """The Plan page opened from the home page, as a browser does (so st.switch_page finds Train)."""
    at = page("app.py")
    at.switch_page("app_pages/5_Plan.py").run()
    assert not at.exception
    return at


def test_the_plan_page_plans_an_hf_model_and_hands_it_to_the_train_page(runs_dir, llama, notes):
    at = plan_page()
    apply(at, "plan_", {**own(model=f"hf:{llama}"), "dataset": "text", "text_file": str(notes), "max_seq_len": 32,
                        "device": "cpu", "effective_batch": 2, "memory_budget_mb": 500.0})
    at.multiselect(key="plan_amp").set_value(["off"])
    at.multiselect(key="plan_clear_cache").set_value(["off"]).run()
    assert "Weights from model.safetensors" in [c.value for c in at.sidebar.caption]
    assert "plan_gpt_preset" not in keys(at)
    assert not at.error and not at.button(key="plan_run").disabled, [e.value for e in at.error]
    at.button(key="plan_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.success and at.success[0].value.startswith("Recommended: "), [w.value for w in at.warning]
    at.button(key="plan_use").click().run()  # opens Train with the plan's settings: the model typed in its box
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="cfg_model").value == OWN
    assert at.text_input(key="cfg_own_model").value == f"hf:{llama}"
    assert at.selectbox(key="cfg_dataset").value == "text" and at.text_input(key="cfg_text_file").value == str(notes)


def test_the_plan_page_takes_your_factory_model_and_data_set_and_refuses_a_wrong_one_under_it(runs_dir, mine,
                                                                                                monkeypatch):
    monkeypatch.setenv("GACCUM_USER_CODE", str(mine.parent))
    at = plan_page()
    apply(at, "plan_", {**own(model=f"{mine}:missing"), **own(dataset=f"{mine}:load")})
    message = under(at, "plan_own_model")
    assert message is not None and "a function missing in" in message, [e.value for e in at.sidebar.error]
    assert at.button(key="plan_run").disabled
    apply(at, "plan_", {"own_model": f"{mine}:build"})
    assert not at.sidebar.error and not at.button(key="plan_run").disabled, [e.value for e in at.sidebar.error]


def test_the_equivalence_page_compares_an_hf_model_with_dropout_off(runs_dir, tmp_path_factory, notes):
    dropping = saved_model(tmp_path_factory, "gpt2", dropout=0.1)
    at = page("app_pages/3_Equivalence.py")
    apply(at, "eq_", {**own(model=f"hf:{dropping}"), "dataset": "text", "text_file": str(notes), "max_seq_len": 32,
                      "steps": 2})
    at.number_input(key="eq_micro_batch_size").set_value(2)
    at.number_input(key="eq_accum_steps").set_value(2).run()
    assert "Weights from model.safetensors" in [c.value for c in at.caption]
    assert {"eq_text_file", "eq_max_seq_len", "eq_no_dropout"} <= {getattr(n, "key", None) for n in leaves(at.main)}
    assert not at.error, [e.value for e in at.error]
    at.button(key="eq_run").click().run()  # GPT-2's dropout draws other masks for the big batch
    assert not at.exception and "dropout" in at.warning[0].value, [w.value for w in at.warning]
    apply(at, "eq_", {"no_dropout": True})
    at.button(key="eq_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "equal up to float rounding" in at.success[0].value, [w.value for w in at.warning]
    assert len(at.get("plotly_chart")) == 3


@pytest.mark.multiprocess  # a worker process of its own
def test_the_equivalence_page_compares_your_factory_model_and_refuses_a_bad_hf_directory(runs_dir, mine, tmp_path,
                                                                                         monkeypatch):
    monkeypatch.setenv("GACCUM_USER_CODE", str(mine.parent))
    at = page("app_pages/3_Equivalence.py")
    assert at.selectbox(key="eq_model").options[-1] == OWN
    apply(at, "eq_", {**own(model=f"{mine}:build"), "steps": 2})
    at.button(key="eq_run").click().run()  # in a worker process of its own (the server never runs your code)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "equal up to float rounding" in at.success[0].value
    apply(at, "eq_", {"own_model": f"hf:{tmp_path}/missing", "dataset": "pydoc"})
    message = under(at, "eq_own_model")
    assert message is not None and "no such directory" in message and "\n" not in message, message

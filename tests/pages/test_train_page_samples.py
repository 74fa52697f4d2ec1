"""A language run's generated samples stay readable whatever the model wrote (issue 33, item 12): a whitespace-only
continuation is said in words, not drawn as an 800 px blank box; long runs of blank lines fold."""

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from gaccum_core.config import RunConfig
from gaccum_core.runs.files import SAMPLES_FILE
from gaccum_core.states import RunState
from gaccum_core.views.samples import readable_sample, sample_line


def test_a_whitespace_only_sample_is_said_in_words():
    assert readable_sample("\n" * 37 + "  ") == "(only whitespace: 37 line breaks, 2 spaces)"
    assert readable_sample("") == "(nothing: an empty continuation)"
    assert sample_line(40, "\n\n", 3) == "step  40: (only whitespace: 2 line breaks)"


def test_text_keeps_its_words_and_folds_long_blank_runs():
    assert readable_sample("def f():\n    return 1\n\n\n\n\nclass A:\n  \n") == "def f():\n    return 1\n\nclass A:"
    assert readable_sample("a\n\nb") == "a\n\nb"  # one blank line stays
    assert sample_line(7, "a\nb", 2) == "step  7: a↵b"


def test_the_train_page_shows_a_whitespace_sample_in_one_line(runs_dir):
    from dashboard import server

    runner = server.get_runner()
    run_id = runner.submit(RunConfig(device="cpu", model="gpt", dataset="pydoc", max_seq_len=16, micro_batch_size=8,
                                     accum_steps=1, max_steps=2, eval_every=2), "blank")
    assert runner.wait(run_id, timeout=120).state == RunState.FINISHED
    samples = runner.store.path(run_id) / SAMPLES_FILE
    samples.write_text(json.dumps({"step": 2, "text": "\n" * 60}) + "\n", encoding="utf-8")
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app_pages/1_Train.py"), default_timeout=120)
    at.session_state["session_runs"] = [run_id]
    at.run()
    assert not at.exception
    shown = [c.value for c in at.code if c.value.startswith("step 2:")]
    assert shown == ["step 2: (only whitespace: 60 line breaks)"] * 2  # the latest, and the list by step

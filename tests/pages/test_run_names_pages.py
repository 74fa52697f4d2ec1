"""Issue 29 G: a run's name is plain text, shown as typed wherever Streamlit renders Markdown, never a link. Its
Markdown signs are escaped; a word Streamlit changes whatever its escapes (a bare link, an emoji, an icon, an
arrow) goes in a code span. tests/browser/test_browser_thread_server.py reads the drawn page in Chromium."""

import json
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import server
from dashboard.markdown import plain
from gaccum_core.states import RunState

ROOT = Path(__file__).resolve().parents[2]
URL_NAME = "see http://2130706433:8501/x"

SHOWN = {  # name as typed: the Markdown the pages give Streamlit
    URL_NAME: "see `http://2130706433:8501/x`",
    "**B** [lnk](http://evil.example)": r"\*\*B\*\* `[lnk](http://evil.example)`",
    "www.evil.com or a@b.co": "`www.evil.com` or `a@b.co`",
    "x :smile: :red[y] $z$": r"x `:smile:` \:red\[y\] \$z\$",
    ":material/home: a`b": r"`:material`\/`home:` a\`b",
    "a -> b <b>&amp;</b>": r"a `->` b \<b>\&amp;\</b>",
    "`http://x.y`": "`` `http://x.y` ``",
    "- 1. # > list": r"\- 1. # > list",
    "1. first": r"1\. first",
    "baseline fp32 b=8 k=4 run of 12:00:01": "baseline fp32 b=8 k=4 run of 12:00:01",
    "20261125-130113-e1758a": "20261125-130113-e1758a",
}


@pytest.mark.parametrize("name", list(SHOWN))
def test_a_name_becomes_markdown_that_shows_it_as_typed(name):
    assert plain(name) == SHOWN[name]


def _runner():
    from dashboard import server

    return server.get_runner()


def _page(script: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / script), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_named_run_is_shown_as_typed_on_home_train_and_its_resume_button(runs_dir, gate):
    gate.hold(step=2)
    at = _page("app_pages/1_Train.py")
    at.selectbox(key="cfg_model").select("mlp")
    at.number_input(key="cfg_max_steps").set_value(4)
    at.text_input(key="run_name").input(URL_NAME).run()
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    gate.wait_until_held()
    home = _page("app.py")
    assert server.wait(60)  # the warm-up the home page started has ended: it shows the runs in progress
    home.run()
    assert [s.value for s in home.success] == [f"In progress: {SHOWN[URL_NAME]} (running, step 1 of 4)"]
    at.run()
    (text,) = [p.proto.text for p in at.get("progress")]
    assert f"· {SHOWN[URL_NAME]} — running: step 1 of 4" in text, text
    _runner().stop(run_id)
    gate.release()
    assert _runner().wait(run_id).state == RunState.STOPPED
    at.run()
    assert at.button(key="resume").label == f"Resume {SHOWN[URL_NAME]} from its checkpoint"


def test_names_of_overlaid_runs_that_coincide_are_shown_as_typed(finished_run, runs_dir):
    names = ["www.evil.com", "**B** [lnk](http://evil.example)"]
    for i, name in enumerate(names):
        run_dir = runs_dir / f"{finished_run.name}-{i}"
        shutil.copytree(finished_run, run_dir)
        status = json.loads((run_dir / "status.json").read_text())
        (run_dir / "status.json").write_text(json.dumps({**status, "name": name}))
    at = _page("app_pages/1_Train.py")
    at.multiselect(key="chart_overlay").set_value([f"{finished_run.name}-{i}" for i in range(2)]).run()
    assert not at.exception, [e.value for e in at.exception]
    (caption,) = [c.value for c in at.caption if "coincide" in c.value]
    shown = caption.split(" coincide")[0].split(" and ")
    assert sorted(shown) == [r"mlp b=16 k=2 · \*\*B\*\* `[lnk](http://evil.example)`",
                             "mlp b=16 k=2 · `www.evil.com`"], caption


def test_a_linked_run_id_that_looks_like_a_link_is_named_as_text(finished_run, runs_dir):
    shutil.copytree(finished_run, runs_dir / finished_run.name)
    at = AppTest.from_file(str(ROOT / "app_pages/2_Runs.py"), default_timeout=60)
    at.query_params["run"] = "www.evil.com"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [w.value for w in at.warning] == [f"No run `'www.evil.com'` in {plain(str(runs_dir.resolve()))}."]


def test_a_refused_tag_that_looks_like_a_link_is_named_as_text(finished_run, runs_dir):
    shutil.copytree(finished_run, runs_dir / finished_run.name)
    at = _page("app_pages/2_Runs.py")
    at.multiselect(key="runs_selected").set_value([finished_run.name]).run()
    at.text_input(key=f"tags_{finished_run.name}").input("http://x.y/z").run()
    assert not at.exception, [e.value for e in at.exception]
    (error,) = [e.value for e in at.error]
    assert error.startswith(f"Tags of {finished_run.name} not saved: tags: `'http://x.y/z'` is not allowed"), error

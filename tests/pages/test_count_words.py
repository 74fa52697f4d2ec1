"""Counts read as English (issue 33, item 12): "1 selected run", not "1 selected runs"; "both modules", not
"in all 2 modules" — one pair of functions (gaccum_core.words.plural, all_of) for every such sentence."""

from pathlib import Path

import pandas as pd
from streamlit.testing.v1 import AppTest

from gaccum_core.config import RunConfig
from gaccum_core.lab.verdict import Reason, verdict_text
from gaccum_core.states import RunState
from gaccum_core.words import all_of, plural

RUNS = str(Path(__file__).resolve().parents[2] / "app_pages/2_Runs.py")


def test_plural_and_all_of():
    assert [plural(n, "selected run") for n in (0, 1, 2)] == ["0 selected runs", "1 selected run", "2 selected runs"]
    assert [all_of(n, "module") for n in (1, 2, 3)] == ["the one module", "both modules", "all 3 modules"]


def test_a_verdict_over_two_differing_modules_says_both():
    table = pd.DataFrame({"rel_l2": [0.5, 0.4]})
    modules = pd.DataFrame({"module": ["a", "b"], "equal": [False, False], "parameters": [1, 1]})
    text = verdict_text(RunConfig(), table, modules, [Reason("a cause", (), "why it happens")])
    assert "in both modules" in text and "all 2" not in text
    one = verdict_text(RunConfig(), table.head(1), modules.head(1), [])
    assert "over 1 parameter tensor in 1 module is" in one


def test_the_runs_page_downloads_name_one_selected_run_in_the_singular(runs_dir):
    from dashboard import server

    runner = server.get_runner()
    run_id = runner.submit(RunConfig(device="cpu", model="mlp", max_steps=2), name="one")
    assert runner.wait(run_id, timeout=120).state == RunState.FINISHED
    at = AppTest.from_file(RUNS, default_timeout=60).run()
    at.multiselect(key="runs_selected").select(run_id).run()
    labels = [b.label for b in at.get("download_button")]
    assert "Download the metrics of the 1 selected run as one CSV" in labels, labels

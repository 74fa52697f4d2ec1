"""The Runs page's table decisions: rows shown and their order, columns, runs going, damaged or elsewhere."""

import pandas as pd

from gaccum_core.views.run_table import (damaged, going, pick_words, running_elsewhere, shown_columns, shown_rows,
                                         unstepped_note)


def _table() -> pd.DataFrame:
    """Newest first, as run_table gives it: a failed run that never stepped, a running one, a finished one."""
    return pd.DataFrame({
        "run_id": ["c", "b", "a", "d"], "name": ["", "", "base", ""],
        "state": ["failed", "running", "finished", "damaged"], "steps": [0, 3, 10, None],
        "label": ["mlp b=8", "cnn b=8", None, None], "message": ["no", "running in pid 7", "", "metrics.csv torn"],
        "perplexity": [None, None, None, None], "tokens_per_s": [None, 12.0, None, None],
        "tags": [(), ("x",), (), ()]})


def test_runs_that_never_stepped_come_last_and_are_named_once():
    table = _table()
    assert list(shown_rows(table)["run_id"]) == ["b", "a", "d", "c"]
    assert unstepped_note(shown_rows(table)) == ("The 1 run that ended before a first step is listed last "
                                                 "(the home page leaves them out).")
    assert unstepped_note(table[table["run_id"] != "c"]) == ""
    assert list(shown_rows(table, tags=["x"])["run_id"]) == ["b"]
    assert shown_rows(table, text="nothing like it").empty


def test_language_columns_only_when_a_language_run_is_listed():
    table = _table()
    assert "tokens_per_s" in shown_columns(table) and "perplexity" not in shown_columns(table)
    assert "tokens_per_s" not in shown_columns(table[table["run_id"] != "b"])
    assert shown_columns(table)[:3] == ["run_id", "name", "state"]


def test_going_damaged_elsewhere_and_the_pick_words():
    table = _table()
    assert going(table) == frozenset({"b"}) and going(table.iloc[0:0]) == frozenset()
    assert damaged(table) == ["metrics.csv torn"]
    assert running_elsewhere(table, here=["b"]) == []
    assert running_elsewhere(table, here=[]) == [("b", "running in pid 7")]
    assert pick_words(table) == {"c": "failed · mlp b=8", "b": "running · cnn b=8", "a": "finished · ",
                                 "d": "damaged · "}

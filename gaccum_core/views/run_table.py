"""The Runs page's table, decided here: which rows a filter shows and in what order, which columns say
something, which runs go, which are damaged or trained elsewhere, and each run's words in a pick list.
Pure: the table comes from runs.catalog.run_table."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from gaccum_core.runs.catalog import filter_runs, unstepped
from gaccum_core.states import RunState

# The table's columns, in the order shown.
COLUMNS = ("run_id", "name", "state", "progress", "tags", "label", "dataset", "world_size", "effective_batch",
           "steps", "final_loss", "test_accuracy", "perplexity", "peak_train_mem_mb", "samples_per_s", "tokens_per_s",
           "skipped", "lr", "optimizer", "created", "message")
LANGUAGE_COLUMNS = ("perplexity", "tokens_per_s")  # said only when a language run is listed
# What a column's figure is, where its name alone does not say (the tables' column help, Home's and Runs').
COLUMN_HELP = {"final_loss": "training loss over the run's last epoch, its steps weighted by their samples "
                             "(the Sweeps page's figure)",
               "peak_train_mem_mb": "the largest training memory of the run's steps (per rank: the largest rank's): "
                                    "weights + gradients + optimizer state + activations saved for backward, the "
                                    "memory chart's main line and the figure the planner counts; not the process's "
                                    "memory, on the CPU mostly the interpreter and libraries"}
COLUMN_TITLES = {"peak_train_mem_mb": "peak training memory (MB)"}  # a column named by what it is, not its key
GOING = (RunState.QUEUED, RunState.RUNNING)


def shown_rows(table: pd.DataFrame, text: str = "", states: Iterable[str] = (),
               tags: Iterable[str] = ()) -> pd.DataFrame:
    """The runs that pass the filter, newest first, those that ended before their first step last."""
    kept = filter_runs(table, text, states, tags)
    if not len(kept):
        return kept
    empty = unstepped(kept)
    return pd.concat([kept[~empty], kept[empty]])


def shown_columns(shown: pd.DataFrame) -> list[str]:
    """The columns worth showing: a language run's columns only when one is listed."""
    silent = {c for c in LANGUAGE_COLUMNS if c in shown.columns and shown[c].isna().all()}
    return [c for c in COLUMNS if c in shown.columns and c not in silent]


def unstepped_note(shown: pd.DataFrame) -> str:
    """A line on the runs listed last because they ended before a first step, or ''."""
    empty = int(unstepped(shown).sum())
    if not empty:
        return ""
    return (f"The {empty} run{'s' if empty > 1 else ''} that ended before a first step "
            f"{'are' if empty > 1 else 'is'} listed last (the home page leaves them out).")


def going(table: pd.DataFrame) -> frozenset[str]:
    """The runs queued or running, here or in another process."""
    return frozenset(table.loc[table["state"].isin(GOING), "run_id"]) if len(table) else frozenset()


def damaged(table: pd.DataFrame) -> list[str]:
    """Why each damaged run cannot be read (its message)."""
    if not len(table):
        return []
    return list(table.loc[table["state"] == RunState.DAMAGED, "message"])


def running_elsewhere(table: pd.DataFrame, here: Iterable[str]) -> list[tuple[str, str]]:
    """(run id, where it runs) of each run running that this server does not train."""
    if "message" not in table.columns or not len(table):
        return []
    rows = table[(table["state"] == RunState.RUNNING) & ~table["run_id"].isin(list(here))]
    return list(zip(rows["run_id"], rows["message"]))


def pick_words(table: pd.DataFrame) -> dict[str, str]:
    """Each run's words in a pick list: 'finished · cnn b=8 k=4'."""
    labels = table["label"].fillna("") if "label" in table.columns else table["state"]
    return dict(zip(table["run_id"], table["state"] + " · " + labels))


def states(table: pd.DataFrame) -> dict[str, str]:
    """Each run's state by id."""
    return dict(zip(table["run_id"], table["state"]))

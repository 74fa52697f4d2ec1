"""The runs a page offers to draw (the Train page's overlay): from the runs index, labelled as reading every run
folder labels them, damaged runs left out, and a draw with nothing changed (also in a server just restarted)
that reads no run folder."""

from __future__ import annotations

import pytest

from gaccum_core.config import RunConfig
from gaccum_core.runs.catalog import choice_labels, run_choices
from gaccum_core.runs.labels import run_labels
from gaccum_core.runs.integrity import checked_status
from gaccum_core.runs.store import RunStore, StoreError
from gaccum_core.runs.store import IMPORTED_SETTINGS, known_settings
from gaccum_core.states import RunState

TINY = RunConfig(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2, max_steps=3)


@pytest.fixture
def store(tmp_path, restarted) -> RunStore:
    """Runs that differ in their settings and names, an imported one, and two damaged ones (config, status)."""
    store = RunStore(tmp_path / "runs")
    store.root.mkdir()
    store.create(TINY, name="baseline")
    store.create(TINY.replace(lr=0.01, amp="bf16"))
    store.create(TINY.replace(accum_steps=8), name="long")
    store.create(TINY)  # the same label as the one before the last: told apart by when it was created
    imported = store.create(TINY.replace(optimizer="adam"), name="version_0")
    store.update_status(imported, state=RunState.IMPORTED, **{IMPORTED_SETTINGS: ["model", "lr"]})
    (store.path(store.create(TINY, name="bad config")) / "config.json").write_text("{not json", encoding="utf-8")
    (store.path(store.create(TINY, name="bad status")) / "status.json").write_text("[]", encoding="utf-8")
    return store


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """The run folders whose status.json or config.json is read from now on."""
    read, config, status = [], RunStore.read_config, RunStore.read_status
    monkeypatch.setattr(RunStore, "read_config", lambda self, run_id: read.append(run_id) or config(self, run_id))
    monkeypatch.setattr(RunStore, "read_status", lambda self, run_id: read.append(run_id) or status(self, run_id))
    return read


def _every_folder_read(store: RunStore) -> dict[str, str]:
    """Each readable run's label, newest first, from its folder's status.json and config.json (what the Train
    page did on every draw before the runs index)."""
    readable = {}
    for run_id in reversed(store.list_runs()):
        try:
            status = checked_status(store.read_status(run_id))
            readable[run_id] = store.read_config(run_id), status.get("name", ""), known_settings(status)
        except (OSError, StoreError, ValueError):
            continue
    configs, names, known = zip(*readable.values())
    return dict(zip(readable, run_labels(configs, names, list(readable), known)))


def _labels(store: RunStore) -> dict[str, str]:
    choices = run_choices(store)
    return dict(zip((choice.run_id for choice in choices), choice_labels(choices)))


def test_the_choices_are_labelled_as_reading_every_folder_labels_them(store, reads):
    expected = _every_folder_read(store)
    assert len(expected) == 5  # the damaged runs left out
    assert any(label.startswith("imported ") for label in expected.values())
    reads.clear()
    assert list(_labels(store).items()) == list(expected.items())  # newest first, label for label


def test_a_draw_with_nothing_changed_reads_no_run_folder(store, reads, restarted):
    first = _labels(store)
    reads.clear()
    assert _labels(store) == first and reads == []
    restarted()  # a server just started: the rows come from the index file
    assert _labels(store) == first and reads == []


def test_a_run_renamed_or_added_is_read_again_alone(store, reads):
    _labels(store)
    renamed = next(choice.run_id for choice in run_choices(store) if choice.name == "long")
    store.update_status(renamed, name="longer")
    added = store.create(TINY.replace(seed=1), name="seed 1")
    reads.clear()
    labels = _labels(store)
    assert set(reads) == {renamed, added}
    assert labels[renamed].endswith("· longer") and labels == _every_folder_read(store)

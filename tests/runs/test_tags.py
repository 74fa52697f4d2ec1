"""Run tags: kept in each run's tags.json (never in its config), validated with a message naming the tag."""

import json

import pytest

from gaccum_core.config import RunConfig
from gaccum_core.runs.catalog import run_table
from gaccum_core.runs.store import MAX_TAGS, RunStore, StoreError, parse_tags

CONFIG = RunConfig(device="cpu", model="mlp", max_steps=2)


def test_tags_round_trip_in_their_own_file_and_leave_the_config_alone(tmp_path):
    store = RunStore(tmp_path)
    run_id = store.create(CONFIG)
    config_text = (tmp_path / run_id / "config.json").read_text()
    assert store.read_tags(run_id) == []
    assert store.write_tags(run_id, parse_tags(" baseline, fp16 ,baseline,, ablation:lr ")) == [
        "baseline", "fp16", "ablation:lr"]  # trimmed, empty items dropped, each once, in the order typed
    assert store.read_tags(run_id) == ["baseline", "fp16", "ablation:lr"]
    assert json.loads((tmp_path / run_id / "tags.json").read_text()) == ["baseline", "fp16", "ablation:lr"]
    assert (tmp_path / run_id / "config.json").read_text() == config_text
    assert not list((tmp_path / run_id).glob(".*.tmp"))  # written atomically, no temporary left
    store.write_tags(run_id, [])
    assert store.read_tags(run_id) == []
    assert run_table(store).loc[0, "tags"] == ()


@pytest.mark.parametrize("text, words", [
    ("try 1", "'try 1' is not allowed"),
    ("a/b", "'a/b' is not allowed"),
    ("x" * 33, "at most 32 characters"),
    ("-x", "'-x' is not allowed"),
    (",".join(f"t{i}" for i in range(MAX_TAGS + 1)), f"at most {MAX_TAGS} tags"),
])
def test_a_bad_tag_is_refused_with_a_message_naming_it_and_what_is_allowed(text, words):
    with pytest.raises(StoreError) as refused:
        parse_tags(text)
    message = str(refused.value)
    assert message.startswith("tags: ") and words in message
    assert "letters, digits" in message or "at most" in message


def test_a_bad_tag_written_directly_is_refused_before_anything_is_written(tmp_path):
    store = RunStore(tmp_path)
    run_id = store.create(CONFIG)
    store.write_tags(run_id, ["kept"])
    with pytest.raises(StoreError, match="tags: 'no good' is not allowed"):
        store.write_tags(run_id, ["fine", "no good"])
    assert store.read_tags(run_id) == ["kept"]


def test_a_tags_file_edited_into_nonsense_is_named_in_the_table_and_can_be_rewritten(tmp_path):
    store = RunStore(tmp_path)
    run_id = store.create(CONFIG)
    (tmp_path / run_id / "tags.json").write_text('{"not": "a list"}')
    with pytest.raises(StoreError, match="tags.json of run .* cannot be read"):
        store.read_tags(run_id)
    row = run_table(store).iloc[0]
    assert row["tags"] == () and "tags.json" in row["message"] and row["state"] == "interrupted"
    store.write_tags(run_id, ["repaired"])
    assert store.read_tags(run_id) == ["repaired"]

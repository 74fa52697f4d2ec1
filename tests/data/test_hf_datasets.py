"""`hf-dataset`: folders that datasets' save_to_disk wrote and folders of .parquet files, built by the tests,
read as ("train" | "val", text) documents a batch of rows at a time, offline; what cannot be read is refused
with the reason."""

import socket

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data import hf_datasets
from gaccum_core.data.hf_datasets import describe_hf_dataset, documents, identity

TEXTS = [f"document {i}: " + "words " * (i % 7) for i in range(25)]


def _config(data_dir, **changes) -> RunConfig:
    return RunConfig(**{"model": "gpt", "dataset": "hf-dataset", "data_dir": str(data_dir), **changes})


def _saved(path, **splits) -> None:
    import datasets

    datasets.disable_progress_bars()
    made = {name: datasets.Dataset.from_dict(columns) for name, columns in splits.items()}
    (datasets.DatasetDict(made) if len(made) > 1 or "train" not in made else made["train"]).save_to_disk(str(path))


def _held_out(texts: list[str]) -> list[tuple[str, str]]:
    """The rule without a validation split: row i is validation when i % 10 == 0."""
    return [("val" if i % 10 == 0 else "train", text) for i, text in enumerate(texts)]


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    """Nothing reaches the network: a connection attempt fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_a_saved_dataset_dict_gives_its_train_and_validation_splits(tmp_path, monkeypatch):
    monkeypatch.setattr(hf_datasets, "BATCH_ROWS", 4)  # several batches per split
    _saved(tmp_path, train={"text": TEXTS[:20], "n": list(range(20))}, validation={"text": TEXTS[20:], "n": [0] * 5})
    assert list(documents(_config(tmp_path))) == [("train", t) for t in TEXTS[:20]] + [("val", t) for t in TEXTS[20:]]
    assert describe_hf_dataset(_config(tmp_path)) == ("hf-dataset: 20 train / 5 validation rows of 'text' "
                                                      "(save_to_disk, the validation split)")


def test_a_test_split_validates_when_there_is_no_validation_split(tmp_path):
    _saved(tmp_path, train={"body": TEXTS[:3]}, test={"body": TEXTS[3:5]}, extra={"body": ["unused"]})
    assert list(documents(_config(tmp_path, text_field="body"))) == (
        [("train", t) for t in TEXTS[:3]] + [("val", t) for t in TEXTS[3:5]])


def test_a_saved_dataset_without_validation_holds_out_every_tenth_row(tmp_path):
    _saved(tmp_path, train={"text": TEXTS})
    assert list(documents(_config(tmp_path))) == _held_out(TEXTS)
    assert "22 train / 3 validation rows" in describe_hf_dataset(_config(tmp_path))


def test_a_saved_dataset_dict_without_train_is_refused(tmp_path):
    _saved(tmp_path, validation={"text": TEXTS[:2]}, test={"text": TEXTS[2:4]})
    with pytest.raises(ConfigError, match="a saved DatasetDict with a 'train' split: its splits are 'validation', "
                                          "'test'") as refused:
        documents(_config(tmp_path))
    assert refused.value.field == "data_dir"


def test_a_parquet_folder_holds_out_every_tenth_row_across_its_files_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(hf_datasets, "BATCH_ROWS", 3)
    (tmp_path / "part").mkdir()
    pq.write_table(pa.table({"text": TEXTS[:12], "id": list(range(12))}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"text": TEXTS[12:], "id": list(range(12, 25))}), tmp_path / "part" / "b.parquet")
    assert list(documents(_config(tmp_path))) == _held_out(TEXTS)
    assert describe_hf_dataset(_config(tmp_path)) == ("hf-dataset: 22 train / 3 validation rows of 'text' "
                                                      "(parquet, every 10th row held out)")


def test_parquet_files_named_by_split_give_their_splits(tmp_path):
    (tmp_path / "data").mkdir()
    for name, texts in (("train-00000-of-00002", TEXTS[:10]), ("train-00001-of-00002", TEXTS[10:20]),
                        ("validation-00000-of-00001", TEXTS[20:])):
        pq.write_table(pa.table({"text": texts}), tmp_path / "data" / f"{name}.parquet")
    assert list(documents(_config(tmp_path))) == [("train", t) for t in TEXTS[:20]] + [("val", t) for t in TEXTS[20:]]


def test_rows_without_text_are_skipped_but_counted(tmp_path):
    texts = [None if i == 3 else t for i, t in enumerate(TEXTS[:12])]
    pq.write_table(pa.table({"text": pa.array(texts, pa.string())}), tmp_path / "rows.parquet")
    assert list(documents(_config(tmp_path))) == [pair for pair in _held_out(texts) if pair[1] is not None]


def test_a_missing_text_field_is_named_with_the_fields_there_are(tmp_path):
    pq.write_table(pa.table({"content": TEXTS, "id": list(range(25))}), tmp_path / "rows.parquet")
    with pytest.raises(ConfigError, match=r"text_field='text' is not allowed: a field of .*rows.parquet: its fields "
                                          r"are 'content', 'id' \(set text_field") as missing:
        documents(_config(tmp_path))
    assert missing.value.field == "text_field"
    with pytest.raises(ConfigError, match="a field of text: 'id' of .* holds int64"):
        documents(_config(tmp_path, text_field="id"))
    _saved(tmp_path / "saved", train={"content": TEXTS})
    with pytest.raises(ConfigError, match="its fields are 'content'"):
        describe_hf_dataset(_config(tmp_path / "saved"))


def test_a_folder_that_is_neither_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="save_to_disk, or of .parquet files: there is no such folder"):
        documents(_config(tmp_path / "nowhere"))
    (tmp_path / "notes.txt").write_text("text")
    with pytest.raises(ConfigError, match="holds neither dataset_dict.json nor state.json .* nor any .parquet file"):
        documents(_config(tmp_path))
    with pytest.raises(ConfigError, match="this is a file"):
        identity(_config(tmp_path / "notes.txt"))
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(ConfigError, match="a .parquet file there cannot be read"):
        documents(_config(tmp_path))


def test_one_row_cannot_be_split_in_two(tmp_path):
    pq.write_table(pa.table({"text": ["alone"]}), tmp_path / "one.parquet")
    with pytest.raises(ConfigError, match="at least 2 rows, one for training and one for validation: it has 1"):
        documents(_config(tmp_path))


def _both(texts: list[str]) -> dict:
    return {"text": texts, "other": texts}


def test_identity_follows_the_files_and_the_field(tmp_path):
    _saved(tmp_path, train=_both(TEXTS[:20]), validation=_both(TEXTS[20:]))
    first = identity(_config(tmp_path))
    assert first == identity(_config(tmp_path)) and first["kind"] == "save_to_disk"
    assert set(first["fingerprints"]) == {"train", "validation"} and all(first["fingerprints"].values())
    assert identity(_config(tmp_path, text_field="other")) == {**first, "text_field": "other"}
    _saved(tmp_path, train=_both(TEXTS[:19]), validation=_both(TEXTS[19:]))
    assert identity(_config(tmp_path))["files"] != first["files"]

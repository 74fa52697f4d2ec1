"""`tokens`: nanoGPT's train.bin and val.bin, written by the tests, read back as the ids and the text they
hold, packed; what the model or the dtype cannot take is refused with the reason; gpt trains on them."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data import token_files
from gaccum_core.data.load import describe_dataset, load_data
from gaccum_core.data.token_files import tokens_sources
from gaccum_core.data.tokens import ByteTokens
from hfmodels import VOCAB, saved_model
from training import trained

TEXT = ("Gradient accumulation sums the gradients of k micro-batches before one optimizer step, "
        "so that b·k samples weigh as one batch would. ") * 8


def _tokens(data_dir, **changes) -> RunConfig:
    values = dict(model="gpt", dataset="tokens", data_dir=str(data_dir), max_seq_len=16, device="cpu")
    return RunConfig(**{**values, **changes})


def _write(path, ids, dtype=np.uint16) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.array(ids, dtype=dtype).tofile(path)


def test_train_bin_reads_back_as_its_ids_and_its_text(tmp_path):
    ids = list(TEXT.encode("utf-8"))
    _write(tmp_path / "train.bin", ids)
    _write(tmp_path / "val.bin", ids[:100])
    bundle = load_data(_tokens(tmp_path))
    assert np.array_equal(np.asarray(bundle.train.ids), ids) and np.array_equal(np.asarray(bundle.test.ids), ids[:100])
    inputs, targets = bundle.train.batch(range(len(bundle.train)))
    assert inputs.shape == (len(bundle.train), 16)
    assert len(bundle.train) == (len(ids) - 1) // 16 and bundle.train.target_tokens([0, 1, 2]) == 48
    read = inputs.flatten().tolist() + [targets[-1, -1].item()]  # the packed windows, end to end
    assert read == ids[:len(bundle.train) * 16 + 1]
    assert bundle.tokens.decode(read) == TEXT.encode("utf-8")[:len(read)].decode("utf-8", errors="replace")
    assert bundle.tokens == ByteTokens() and bundle.num_classes == 256


def test_uint32_ids_read_back(tmp_path):
    ids = list(TEXT.encode("utf-8"))
    _write(tmp_path / "train.bin", ids, np.uint32)
    train, _ = tokens_sources(_tokens(tmp_path, token_dtype="uint32"))
    assert np.array_equal(np.asarray(train.ids[:len(ids) - len(ids) // 10]), ids[:len(ids) - len(ids) // 10])


def test_without_val_bin_the_last_tenth_is_held_out_and_said(tmp_path):
    ids = [i % 256 for i in range(1000)]
    _write(tmp_path / "train.bin", ids)
    train, validation = tokens_sources(_tokens(tmp_path))
    assert np.array_equal(np.asarray(train.ids), ids[:900]) and np.array_equal(np.asarray(validation.ids), ids[900:])
    line = describe_dataset(_tokens(tmp_path))
    assert line == ("tokens: 900 train / 100 validation uint16 ids (the last tenth of train.bin held out, no "
                    "val.bin), 56 / 6 packed sequences of 16 tokens, bytes")


def test_a_folder_without_train_bin_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="there is no such folder") as missing:
        tokens_sources(_tokens(tmp_path / "nowhere"))
    assert missing.value.field == "data_dir"
    with pytest.raises(ConfigError, match=r"nanoGPT's layout: .* has no train.bin"):
        tokens_sources(_tokens(tmp_path))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="this is a file"):
        tokens_sources(_tokens(tmp_path / "file"))


def test_a_size_not_a_multiple_of_the_dtype_is_refused(tmp_path):
    _write(tmp_path / "train.bin", [1, 2, 3])  # 6 bytes: not whole uint32 ids
    with pytest.raises(ConfigError, match=r"its 6 bytes are not a whole number of uint32 ids \(4 bytes each\)") as bad:
        tokens_sources(_tokens(tmp_path, token_dtype="uint32"))
    assert bad.value.field == "token_dtype"
    (tmp_path / "train.bin").write_bytes(b"")
    with pytest.raises(ConfigError, match="is empty"):
        tokens_sources(_tokens(tmp_path))


def test_a_vocabulary_larger_than_uint16_holds_is_refused(tmp_path, monkeypatch):
    _write(tmp_path / "train.bin", range(1000))
    fake = SimpleNamespace(vocab_size=70_000, pad=0, name="a fake tokenizer")
    monkeypatch.setattr(token_files, "tokens_for", lambda config: fake)
    with pytest.raises(ConfigError, match="uint16 holds ids up to 65,535: the vocabulary has 70,000 ids; write "
                                          "and read uint32") as overflow:
        tokens_sources(_tokens(tmp_path))
    assert overflow.value.field == "token_dtype"
    _write(tmp_path / "train.bin", range(1000), np.uint32)
    assert len(tokens_sources(_tokens(tmp_path, token_dtype="uint32"))[0].ids) == 900


def test_an_id_beyond_the_models_vocabulary_is_refused(tmp_path):
    _write(tmp_path / "train.bin", [65] * 500 + [256] + [66] * 500)
    with pytest.raises(ConfigError, match="vocabulary of 256 \\(bytes\\): .*train.bin holds id 256") as beyond:
        tokens_sources(_tokens(tmp_path))
    assert beyond.value.field == "data_dir"
    _write(tmp_path / "train.bin", [65] * 1000)
    _write(tmp_path / "val.bin", [65] * 99 + [300])
    with pytest.raises(ConfigError, match="val.bin holds id 300"):
        tokens_sources(_tokens(tmp_path))


def test_an_hf_models_tokenizer_sets_the_vocabulary(tmp_path, tmp_path_factory):
    model = f"hf:{saved_model(tmp_path_factory, weights=False)}"
    _write(tmp_path / "train.bin", [i % VOCAB for i in range(2000)])
    train, _ = tokens_sources(_tokens(tmp_path, model=model))
    assert len(train.ids) == 1800
    _write(tmp_path / "val.bin", [VOCAB] * 20)
    with pytest.raises(ConfigError, match=f"vocabulary of {VOCAB} .*val.bin holds id {VOCAB}"):
        tokens_sources(_tokens(tmp_path, model=model))


def test_the_largest_id_is_found_in_chunks_once_per_file_version(tmp_path, monkeypatch):
    monkeypatch.setattr(token_files, "SCAN_IDS", 7)
    _write(tmp_path / "train.bin", [1] * 95 + [200] + [2] * 4)
    path = tmp_path / "train.bin"
    assert token_files.largest_id(path, "uint16", path.stat()) == 200
    scans, fromfile = [], np.fromfile
    monkeypatch.setattr(np, "fromfile", lambda *a, **k: scans.append(a) or fromfile(*a, **k))
    assert token_files.largest_id(path, "uint16", path.stat()) == 200 and scans == []  # remembered
    _write(path, [1] * 100 + [3])  # a new version (another size): scanned again
    assert token_files.largest_id(path, "uint16", path.stat()) == 3 and len(scans) == 16  # 15 reads of 7, one empty


def test_a_split_shorter_than_one_sequence_is_refused(tmp_path):
    _write(tmp_path / "train.bin", [65] * 100)
    with pytest.raises(ConfigError, match=r"max_seq_len \+ 1 = 17 ids per split: the last tenth of train.bin "
                                          r"\(there is no val.bin\) holds 10"):
        tokens_sources(_tokens(tmp_path))


def test_gpt_trains_on_a_tokens_folder(tmp_path):
    _write(tmp_path / "train.bin", list(TEXT.encode("utf-8")))
    config = _tokens(tmp_path, micro_batch_size=2, accum_steps=2, max_steps=3, eval_every=3, checkpoint_every=0)
    _, rows = trained(config)
    assert [r["step"] for r in rows.steps] == [1, 2, 3]
    assert all(math.isfinite(r["loss"]) for r in rows.steps)
    assert all(r["tokens"] == 2 * 2 * 16 for r in rows.steps)  # packed: every window holds b·k·L targets
    assert math.isfinite(rows.evals[-1]["test_loss"])

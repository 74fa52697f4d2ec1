"""The token cache: a corpus tokenised once equals the same text read and chunked in memory, is reused without
tokenising again, is built once by concurrent openers, and leaves nothing a later run would take for whole when a
build is stopped, interrupted or killed; its sequences hold no per-token Python object."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.data import tokenising
from gaccum_core.data.corpus import Corpus
from gaccum_core.data.sequences import IGNORE
from gaccum_core.data.text import cache_status, describe_text, text_sources
from gaccum_core.data.token_cache import cache_folder, open_cache, read_cache, tokenise_in_memory
from gaccum_core.data.tokenising import TokenisingStopped, ids_dtype
from gaccum_core.data.tokens import ByteTokens

ROOT = Path(__file__).resolve().parents[2]


def _plain_documents(text: str) -> list[list[int]]:
    """The rule, written plainly: the whole text split on blank lines, stripped, 2 characters or more, as bytes."""
    return [list(p.strip().encode()) for p in re.split(r"\n\s*\n", text) if len(p.strip()) >= 2]


def _plain_splits(text: str) -> tuple[list[list[int]], list[list[int]]]:
    """(train, validation) documents: every tenth, from the first, held out."""
    documents = _plain_documents(text)
    return ([d for i, d in enumerate(documents) if i % 10], [d for i, d in enumerate(documents) if i % 10 == 0])


def _plain_chunks(documents: list[list[int]], max_seq_len: int) -> list[list[int]]:
    size = max_seq_len + 1
    pieces = [doc[i:i + size] for doc in documents for i in range(0, len(doc), size)]
    return [p for p in pieces if len(p) >= 2]


def _plain_windows(documents: list[list[int]], max_seq_len: int) -> list[list[int]]:
    """Documents joined, each followed by byte 0, cut into windows of max_seq_len + 1 that overlap by one."""
    stream = [t for doc in documents for t in (*doc, 0)]
    return [stream[i * max_seq_len:(i + 1) * max_seq_len + 1] for i in range((len(stream) - 1) // max_seq_len)]


def _rows(sequences) -> list[list[int]]:
    """Every sequence's tokens (its inputs and last target), read by index."""
    inputs, targets = sequences.batch(torch.arange(len(sequences)))
    rows = []
    for x, y in zip(inputs, targets):
        kept = int((y != IGNORE).sum())
        rows.append(x[:kept].tolist() + y[kept - 1:kept].tolist())
    return rows


def _corpus(tmp_path: Path, documents: int = 60, name: str = "notes.txt") -> Path:
    words = ["alpha", "beta", "gamma", "délta", "😀", "x", "\t", "  "]
    rng = np.random.default_rng(0)
    text = "\n \n".join(" ".join(rng.choice(words, rng.integers(1, 90))) for _ in range(documents))
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _config(path: Path, cache: Path, **changes) -> RunConfig:
    return RunConfig(model="gpt", dataset="text", text_file=str(path), cache_dir=str(cache), **changes)


@pytest.mark.parametrize("max_seq_len", [5, 32])
def test_a_cached_corpus_gives_the_sequences_of_the_text_read_and_chunked_in_memory(tmp_path, max_seq_len):
    path = _corpus(tmp_path)
    train_docs, val_docs = _plain_splits(path.read_text(encoding="utf-8"))
    padded = text_sources(_config(path, tmp_path / "cache", max_seq_len=max_seq_len))
    packed = text_sources(_config(path, tmp_path / "cache", max_seq_len=max_seq_len, packing="on"))
    for docs, padded_split, packed_split in zip((train_docs, val_docs), padded, packed):
        assert _rows(padded_split) == _plain_chunks(docs, max_seq_len)
        assert padded_split.total_targets == sum(len(c) - 1 for c in _plain_chunks(docs, max_seq_len))
        assert _rows(packed_split) == _plain_windows(docs, max_seq_len)
    assert len(list((tmp_path / "cache").glob("notes.txt-*/meta.json"))) == 1  # one cache serves both


def test_pydoc_is_tokenised_in_memory_by_the_same_rule():
    from gaccum_core.data.text import pydoc_documents

    documents = [list(d.encode()) for d in pydoc_documents()]
    train, test = text_sources(RunConfig(model="gpt", dataset="pydoc", max_seq_len=64))
    assert _rows(train)[:300] == _plain_chunks([d for i, d in enumerate(documents) if i % 10], 64)[:300]
    assert _rows(test) == _plain_chunks(documents[::10], 64)


def test_the_cache_layout_is_nanogpts_with_document_spans(tmp_path):
    path = _corpus(tmp_path)
    config = _config(path, tmp_path / "cache")
    assert not cache_status(config).cached and "kB to tokenise on Start" in describe_text(config)
    text_sources(config)
    folder, = (tmp_path / "cache").glob("notes.txt-*/")
    meta = json.loads((folder / "meta.json").read_text())
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["meta.json", "verified.json", *(f"{split}{suffix}" for split in ("train", "val") for suffix in
                                         (".bin", "_docs.npy", "_prompts.npy", "_groups.npy", "_advantages.npy"))])
    assert not np.load(folder / "train_prompts.npy").any()  # plain documents have no prompt
    assert meta["dtype"] == "uint16" and meta["tokenizer"] == {"kind": "bytes"} and meta["mb_per_s"] > 0
    train_docs, val_docs = _plain_splits(path.read_text(encoding="utf-8"))
    ids = np.fromfile(folder / "train.bin", dtype=np.uint16)
    spans = np.load(folder / "train_docs.npy")
    assert spans.dtype == np.int64 and [ids[a:b].tolist() for a, b in spans] == train_docs
    assert len(ids) == sum(len(d) + 1 for d in train_docs) and (ids[spans[:, 1]] == 0).all()  # byte 0 after each
    assert meta["documents"] == {"train": len(train_docs), "val": len(val_docs)}
    status = cache_status(config)
    assert status.cached and describe_text(config).startswith("text: ")
    assert "MB to tokenise" not in describe_text(config)
    assert json.loads((tmp_path / "cache" / "speed.json").read_text())["bytes"] == meta["mb_per_s"]


def test_a_second_open_reuses_the_cache_and_a_changed_file_is_tokenised_again(tmp_path, monkeypatch):
    calls = []
    real = ByteTokens.encode_arrays
    monkeypatch.setattr(ByteTokens, "encode_arrays", lambda self, texts: calls.append(len(texts)) or real(self, texts))
    path = _corpus(tmp_path)
    config = _config(path, tmp_path / "cache", max_seq_len=16)
    first = _rows(text_sources(config)[0])
    built = len(calls)
    assert built >= 1
    assert _rows(text_sources(config)[0]) == first and len(calls) == built  # no encode call
    path.write_text(path.read_text(encoding="utf-8") + "\n\none more paragraph", encoding="utf-8")
    text_sources(config)
    assert len(calls) > built and len(list((tmp_path / "cache").glob("notes.txt-*/"))) == 2


def test_ids_are_uint16_below_65536_ids_else_uint32(tmp_path):
    assert ids_dtype(256) == np.uint16 and ids_dtype(65_535) == np.uint16 and ids_dtype(65_536) == np.uint32

    class WideTokens:
        """A vocabulary of 70,000 ids: each byte + 65,600, then an EOS of 69,999 ending each document."""

        pad, eos, vocab_size, name, appends_eos = -1, 69_999, 70_000, "wide", True
        identity = {"kind": "wide"}

        def encode_arrays(self, texts):
            return [np.append(np.frombuffer(t.encode(), np.uint8).astype(np.int64) + 65_600, 69_999) for t in texts]

    source = Corpus(str(_corpus(tmp_path)))
    cache = open_cache(tmp_path / "cache", source, WideTokens())
    ids, spans = cache.splits["train"]
    assert ids.dtype == np.uint32 and cache.meta["dtype"] == "uint32" and ids.max() == 69_999
    train_docs, _ = _plain_splits(Path(source.paths[0]).read_text(encoding="utf-8"))
    first = ids[spans[0, 0]:spans[0, 1]].astype(np.int64)
    assert (first[:-1] - 65_600).tolist() == train_docs[0] and first[-1] == 69_999  # a model's EOS is its document's


def test_a_stopped_or_interrupted_build_leaves_no_cache_and_a_later_one_works(tmp_path, monkeypatch):
    monkeypatch.setattr(tokenising, "BATCH_DOCUMENTS", 5)
    path = _corpus(tmp_path)
    source, root = Corpus(str(path)), tmp_path / "cache"
    with pytest.raises(TokenisingStopped):
        open_cache(root, source, ByteTokens(), should_stop=lambda: True)

    def interrupt(progress):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        open_cache(root, source, ByteTokens(), progress=interrupt)
    assert sorted(p.name for p in root.iterdir() if not p.name.endswith(".lock")) == []
    seen = []
    cache = open_cache(root, source, ByteTokens(), progress=seen.append)
    assert cache.folder.is_dir() and seen and seen[-1].bytes_done <= seen[-1].bytes_total == path.stat().st_size
    words = seen[-1].words()
    kb = f"{path.stat().st_size / 1024:.0f}"  # a small corpus reads in kB, not "0.0 of 0.0 MB"
    assert words.startswith(f"tokenising notes.txt: {kb} of {kb} kB · ") and "MB/s · " in words and "tokens/s" in words


def test_a_killed_build_leaves_no_cache_and_the_next_build_clears_what_it_left(tmp_path):
    """A build killed with SIGKILL (no cleanup runs; a process run's Stop before its first step kills its worker):
    its temporary folder is never read as a cache, and the next build removes it."""
    path = _corpus(tmp_path, documents=2000)
    root = tmp_path / "cache"
    code = (f"import time; from pathlib import Path\nfrom gaccum_core.data import token_cache, tokenising\n"
            f"from gaccum_core.data.corpus import Corpus\nfrom gaccum_core.data.tokens import ByteTokens\n"
            f"tokenising.BATCH_DOCUMENTS = 50\n"
            f"token_cache.open_cache(Path({str(root)!r}), Corpus({str(path)!r}), ByteTokens(),"
            f" progress=lambda p: (print('batch', flush=True), time.sleep(60)))\n")
    child = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "batch"  # it has written a batch
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    source = Corpus(str(path))
    folder = cache_folder(root, source.name, source.identity(), ByteTokens())
    assert list(root.glob(f"{folder.name}.tmp-*")) and read_cache(folder) is None and not folder.exists()
    other = _corpus(tmp_path, documents=20, name="other.txt")
    open_cache(root, Corpus(str(other)), ByteTokens())  # a build of any corpus clears what a killed one left
    assert not list(root.glob("*.tmp-*"))
    assert open_cache(root, source, ByteTokens()).folder == folder and folder.is_dir()


def test_concurrent_openers_wait_for_one_build(tmp_path, monkeypatch):
    calls, started = [], threading.Barrier(3)
    real = ByteTokens.encode_arrays

    def slow(self, texts):
        calls.append(threading.get_ident())
        time.sleep(0.05)
        return real(self, texts)

    monkeypatch.setattr(ByteTokens, "encode_arrays", slow)
    monkeypatch.setattr(tokenising, "BATCH_DOCUMENTS", 10)
    path, root = _corpus(tmp_path), tmp_path / "cache"
    caches, waited = [], []

    def open_one():
        started.wait()
        caches.append(open_cache(root, Corpus(str(path)), ByteTokens(),
                                 progress=lambda p: waited.append(p) if p.waiting else None))

    threads = [threading.Thread(target=open_one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(caches) == 3 and len({c.folder for c in caches}) == 1
    assert len(set(calls)) == 1 and len(calls) == 6  # one thread tokenised, 60 documents in batches of 10
    assert waited and waited[0].words() == "tokenising notes.txt: waiting for another process that tokenises it"


def test_packed_sequences_are_consecutive_windows_of_train_bin_only(tmp_path):
    path = _corpus(tmp_path)
    config = _config(path, tmp_path / "cache", max_seq_len=8, packing="on")
    train, test = text_sources(config)
    folder, = (tmp_path / "cache").glob("notes.txt-*/")
    for split, sequences in (("train", train), ("val", test)):
        ids = np.fromfile(folder / f"{split}.bin", dtype=np.uint16).astype(np.int64)
        assert len(sequences) == (len(ids) - 1) // 8
        x, y = sequences.batch(torch.arange(len(sequences)))
        assert torch.equal(x.flatten(), torch.from_numpy(ids[:len(sequences) * 8]))
        assert torch.equal(y.flatten(), torch.from_numpy(ids[1:len(sequences) * 8 + 1]))
        assert sequences.target_tokens(torch.tensor([0, 2])) == 16


def test_sequences_over_a_50_mb_corpus_hold_no_per_token_object(tmp_path):
    """Opening the cached corpus and reading batches allocates a few MB (per-document arrays), not the corpus."""
    path = tmp_path / "big.jsonl"
    line = json.dumps({"text": "lorem ipsum dolor sit amet " * 180}) + "\n"  # about 5 kB a document
    with open(path, "w") as file:
        file.writelines([line] * (50 * 2**20 // len(line)))
    config = _config(path, tmp_path / "cache", max_seq_len=64)
    tracemalloc.start()
    text_sources(config)  # the build: a batch of text at a time
    _, build_peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    train, test = text_sources(config)
    for start in range(0, 40, 8):
        train.batch(torch.arange(start * 1000, start * 1000 + 8))
    _, open_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(train) > 700_000 and path.stat().st_size > 50 * 10**6
    assert open_peak < 2 * 2**20, f"opening peaked at {open_peak / 2**20:.1f} MB"
    assert build_peak < 24 * 2**20, f"the build peaked at {build_peak / 2**20:.1f} MB"


def test_in_memory_tokenising_gives_the_arrays_the_files_hold(tmp_path):
    path = _corpus(tmp_path)
    on_disk = open_cache(tmp_path / "cache", Corpus(str(path)), ByteTokens())
    in_memory = tokenise_in_memory(Corpus(str(path)).documents(), ByteTokens())
    for split in ("train", "val"):
        assert all(np.array_equal(a, b) for a, b in zip(on_disk.splits[split], in_memory.splits[split]))


def test_an_hf_dataset_is_cached_by_the_same_code_and_equals_the_same_rows_as_jsonl(tmp_path):
    """hf_datasets hands the cache (split, text) documents and an identity; its rows give the text corpus's sequences."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [f"row {i}: " + "words " * (i % 13) + "end" for i in range(45)]
    (tmp_path / "parquet").mkdir()
    pq.write_table(pa.table({"text": rows}), tmp_path / "parquet" / "data.parquet")
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"text": r}) + "\n" for r in rows))
    saved = RunConfig(model="gpt", dataset="hf-dataset", data_dir=str(tmp_path / "parquet"),
                      cache_dir=str(tmp_path / "cache"), max_seq_len=16)
    assert "to tokenise on Start" in describe_text(saved) and describe_text(saved).startswith("hf-dataset: 40 train")
    as_jsonl = text_sources(_config(tmp_path / "rows.jsonl", tmp_path / "cache", max_seq_len=16))
    for hf_split, text_split in zip(text_sources(saved), as_jsonl):
        assert _rows(hf_split) == _rows(text_split)
    assert cache_status(saved).cached and describe_text(saved).startswith("hf-dataset: ")
    assert len(list((tmp_path / "cache").glob("parquet-*/meta.json"))) == 1


def test_preflight_of_an_uncached_corpus_tokenises_two_documents_and_caches_nothing(tmp_path, monkeypatch):
    from gaccum_core.config import ConfigError
    from gaccum_core.train.checks import preflight

    encoded = []
    real = ByteTokens.encode_arrays
    monkeypatch.setattr(ByteTokens, "encode_arrays", lambda self, texts: encoded.extend(texts) or real(self, texts))
    config = _config(_corpus(tmp_path), tmp_path / "cache", device="cpu")
    preflight(config)
    assert len(encoded) == 2 and not (tmp_path / "cache").exists()
    (tmp_path / "one.txt").write_text("a single paragraph")
    with pytest.raises(ConfigError, match="at least 2 paragraphs"):
        preflight(_config(tmp_path / "one.txt", tmp_path / "cache", device="cpu"))
    text_sources(config)
    with pytest.raises(ConfigError, match="micro_batch_size"):  # cached: checked against its sequences
        preflight(config.replace(micro_batch_size=10**4))

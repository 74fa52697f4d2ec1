"""Issue 40 #1 and #5: a damaged token cache is found when it is opened, tokenised again with a line that says
why, and trained on whole; a verified one is not read again until one of its files' (size, mtime, ctime, inode)
differs (an edit whose mtime was put back included); a read-only one is verified in memory; a corpus gone is
refused in one line naming its file."""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from test_token_cache import _config, _corpus, _plain_chunks, _plain_splits, _rows

from gaccum_core.cli.main import main
from gaccum_core.config import ConfigError
from gaccum_core.data import cache_check
from gaccum_core.data.text import cache_status, corpus_source, text_sources, tokenise_corpus
from gaccum_core.data.token_cache import cache_folder
from gaccum_core.data.tokens import tokens_for
from gaccum_core.train import engine as engine_module
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper

SEQ = 16


def _ids(folder, split="train"):
    return np.memmap(folder / f"{split}.bin", dtype=np.uint16, mode="r+")


def _spans(folder, split="train"):
    return np.load(folder / f"{split}_docs.npy", mmap_mode="r+")


def _negative_spans(folder):
    spans = _spans(folder)
    spans[7] = (-5, -1)
    spans.flush()


def _uint8_meta(folder):
    meta = json.loads((folder / "meta.json").read_text())
    meta["dtype"], meta["tokens"] = "uint8", {split: 2 * count for split, count in meta["tokens"].items()}
    (folder / "meta.json").write_text(json.dumps(meta))


def _big_ids(folder):
    ids = _ids(folder)
    ids[100:103] = 65_535
    ids.flush()


def _long_span(folder):
    spans = _spans(folder)
    spans[-1, 1] += 10**9
    spans.flush()


def _overlapping_spans(folder):
    """Document 6 starts inside document 5 (a chunk boundary lies between them: 3 spans a chunk)."""
    spans = _spans(folder)
    spans[6, 0] = spans[5, 0]
    spans.flush()


def _int32_spans(folder):
    np.save(folder / "val_docs.npy", np.load(folder / "val_docs.npy").astype(np.int32))


def _short_ids(folder):
    with open(folder / "val.bin", "r+b") as file:
        file.truncate(os.path.getsize(folder / "val.bin") - 2)


def _other_format(folder):
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "format": 3}))


def _long_prompt(folder):
    prompts = np.load(folder / "train_prompts.npy")
    prompts[3] = 10**6
    np.save(folder / "train_prompts.npy", prompts)


DAMAGES = {  # damage → what the line says
    "meta.json gone": (lambda folder: os.remove(folder / "meta.json"), "(meta.json is missing)"),
    "another format": (_other_format, "meta.json says format 3, where this cache is of format 2"),
    "prompt past its document": (_long_prompt, "train_prompts.npy: document 3 has a prompt past its document's ids (1000000)"),
    "spans -5/-1": (_negative_spans, "train_docs.npy: document 7 spans (-5, -1)"),
    "uint8 meta": (_uint8_meta, "meta.json says dtype 'uint8', where a vocabulary of 256 ids is written as uint16"),
    "ids 65535": (_big_ids, "train.bin: id 65,535 at 100 is not below the vocabulary's 256"),
    "span 1e9 long": (_long_span, "spans must follow one another inside the split's"),
    "overlapping spans": (_overlapping_spans, "train_docs.npy: document 6 spans"),
    "int32 spans": (_int32_spans, "val_docs.npy holds int32 ("),
    "val.bin cut": (_short_ids, "val.bin holds"),
}


@pytest.fixture
def cached(tmp_path, monkeypatch):
    """A corpus of 60 paragraphs (a few KB), tokenised; its config and cache folder. Checks read 3 spans (or 24
    ids) a chunk, so damage lies past a chunk boundary."""
    monkeypatch.setattr(cache_check, "CHUNK_BYTES", 48)
    config = _config(_corpus(tmp_path), tmp_path / "cache", max_seq_len=SEQ)
    text_sources(config)
    (folder,) = (tmp_path / "cache").glob("notes.txt-*/")
    return config, folder


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_cache_is_tokenised_again_saying_why(cached, damage):
    config, folder = cached
    spoil, said = DAMAGES[damage]
    spoil(folder)
    assert not cache_status(config).cached
    seen = []
    train, val = text_sources(config, progress=seen.append)
    assert seen and all(f"notes.txt again, its token cache being damaged (" in p.words() for p in seen)
    assert said in seen[0].words(), seen[0].words()
    train_docs, val_docs = _plain_splits(open(config.text_file, encoding="utf-8").read())
    assert _rows(train) == _plain_chunks(train_docs, SEQ) and _rows(val) == _plain_chunks(val_docs, SEQ)
    assert cache_status(config).cached and (folder / "verified.json").exists()


def test_a_run_on_a_damaged_cache_trains_on_the_corpus_tokenised_again(cached, monkeypatch):
    """Ids of 65,535 were trained on ("IndexError: index out of range" once a batch held one)."""
    config, folder = cached
    _big_ids(folder)
    monkeypatch.setattr(engine_module, "sample_text", lambda *args: "")  # its greedy continuation: seconds, not data
    engine = Engine(config.replace(device="cpu", eval_every=10**9, eval_batches=1, checkpoint_every=0, max_steps=1,
                                   micro_batch_size=2, accum_steps=1))
    rows = RowKeeper()
    engine.run(rows)
    assert [row["step"] for row in rows.steps] == [1]
    train_docs, _ = _plain_splits(open(config.text_file, encoding="utf-8").read())
    assert _rows(engine.data.train) == _plain_chunks(train_docs, SEQ)


def test_the_command_line_says_why_it_tokenises_again(cached, capsys):
    from gaccum_core.cli.plan import tokenise_with_progress

    config, folder = cached
    _uint8_meta(folder)
    tokenise_with_progress(config, every_s=0)
    err = capsys.readouterr().err
    assert err.startswith("gaccum: tokenising notes.txt again, its token cache being damaged (meta.json says dtype "
                            "'uint8', where a vocabulary of 256 ids is written as uint16): 0 of 13 kB"), err


@pytest.fixture
def checks(monkeypatch):
    """The verifications of a cache, counted."""
    count, real = [], cache_check.damage
    monkeypatch.setattr(cache_check, "damage", lambda *args: count.append(args[0]) or real(*args))
    return count


def test_a_verified_cache_is_checked_again_only_when_a_stamp_differs(cached, checks):
    config, folder = cached
    for _ in range(3):
        text_sources(config)
    assert checks == []  # verified by its build, as verified.json says
    ids = folder / "train.bin"
    os.utime(ids, ns=(ids.stat().st_atime_ns, ids.stat().st_mtime_ns + 10**9))
    text_sources(config)
    text_sources(config)
    assert checks == [folder]
    shutil.copy2(ids, folder / "copy")  # the same bytes and mtime, another inode
    os.replace(folder / "copy", ids)
    text_sources(config)
    assert checks == [folder] * 2


def test_an_edit_of_the_same_size_with_its_mtime_put_back_is_found(cached, checks):
    """Issue 40 #5: the edit changes ctime alone."""
    config, folder = cached
    before = (folder / "train.bin").stat()
    _big_ids(folder)
    os.utime(folder / "train.bin", ns=(before.st_atime_ns, before.st_mtime_ns))
    after = (folder / "train.bin").stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    seen = []
    text_sources(config, progress=seen.append)
    assert checks == [folder] * 2 and "train.bin: id 65,535 at 100" in seen[0].words()  # found; rebuilt, verified


def test_ctime_stays_out_of_the_cache_key(cached, checks):
    """A corpus whose ctime alone changed (chmod) keeps its cache: it is not tokenised again."""
    config, folder = cached
    corpus = config.text_file
    os.chmod(corpus, 0o600)
    seen = []
    text_sources(config, progress=seen.append)
    assert seen == [] and checks == [] and [p.name for p in folder.parent.iterdir() if p.is_dir()] == [folder.name]


def test_a_read_only_cache_is_verified_in_memory_and_a_damaged_one_refused(tmp_path, small_disk, checks):
    config = _config(_corpus(tmp_path), small_disk, max_seq_len=SEQ)
    text_sources(config)
    (folder,) = small_disk.glob("notes.txt-*/")
    (folder / "verified.json").unlink()  # as a cache copied from elsewhere
    checks.clear()  # of the build's own
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    first = _rows(text_sources(config)[0])
    assert _rows(text_sources(config)[0]) == first and checks == [folder]  # verified once, remembered
    assert not (folder / "verified.json").exists()
    subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    _big_ids(folder)
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    with pytest.raises(ConfigError, match=r"^cache_dir=.* is not allowed: a folder the token cache can be written to: "
                                          r"the cache of notes.txt there is damaged \(train.bin: id 65,535 at 100 "):
        text_sources(config)


def test_a_damaged_cache_whose_corpus_is_gone_is_refused_in_one_line(cached, capsys):
    config, folder = cached
    _big_ids(folder)
    os.remove(config.text_file)
    with pytest.raises(ConfigError, match="text_file=.*notes.txt"):
        text_sources(config)
    with pytest.raises(ConfigError, match="text_file=.*notes.txt"):
        tokenise_corpus(config)
    code = main(["check", "--model", "gpt", "--dataset", "text", "--text-file", config.text_file, "--cache-dir",
                 config.cache_dir, "--max-seq-len", "16", "--device", "cpu"])
    (line,) = capsys.readouterr().err.splitlines()
    assert code == 2 and line.startswith(f"gaccum: error: --text-file={config.text_file!r} is not allowed: "), line


def test_a_cache_of_the_older_format_is_tokenised_again_saying_so_and_removed(tmp_path):
    """A format-1 folder of the same corpus (as gaccum wrote it before prompt lengths) is replaced, with a reason."""
    config = _config(_corpus(tmp_path), tmp_path / "cache")
    text_sources(config)
    source, tokens = corpus_source(config), tokens_for(config)
    folder = cache_folder(tmp_path / "cache", source.name, source.identity(), tokens)
    old = cache_folder(tmp_path / "cache", source.name, source.identity(), tokens, format=1)
    os.rename(folder, old)
    seen = []
    text_sources(config, progress=seen.append)
    assert seen and all("notes.txt again, its token cache being of format 1, where this gaccum reads 2" in p.words()
                        for p in seen)
    assert folder.is_dir() and not old.exists()

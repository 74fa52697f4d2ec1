"""A corpus read a document at a time gives the documents of the whole text split at once; shards in a folder or a
glob read as one file; what cannot be read is refused naming the shard."""

import json
import random
import re

import pytest

from gaccum_core.config import ConfigError
from gaccum_core.data import corpus
from gaccum_core.data.corpus import Corpus


def _plain_paragraphs(text: str) -> list[str]:
    """The rule, written plainly: split the whole text on blank lines, strip, keep pieces of 2 characters or more."""
    return [p.strip() for p in re.split(r"\n\s*\n", text) if len(p.strip()) >= 2]


def _texts(source: Corpus) -> list[str]:
    return [text for _, text in source.documents()]


def test_paragraphs_read_in_small_blocks_equal_the_whole_text_split_at_once(tmp_path, monkeypatch):
    """Breaks cut by a block's end, spaces and odd whitespace between newlines, characters cut in two."""
    pieces = ["a", "b", " ", "\n", "\t", "\r", "é", "\u2028", "\x1c", "\u00a0", "😀", "\n\n", "word"]
    rng = random.Random(0)
    path = tmp_path / "notes.txt"
    for trial in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 60)))
        path.write_text(text, encoding="utf-8")
        expected = _plain_paragraphs(text)
        monkeypatch.setattr(corpus, "BLOCK", rng.randint(1, 9))
        if len(expected) < 2:
            with pytest.raises(ConfigError, match="at least 2 paragraphs"):
                _texts(Corpus(str(path)))
        else:
            assert _texts(Corpus(str(path))) == expected, repr(text)


def test_every_tenth_document_is_held_out_from_the_first(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("\n\n".join(f"paragraph {i}" for i in range(25)), encoding="utf-8")
    splits = [split for split, _ in Corpus(str(path)).documents()]
    assert [i for i, s in enumerate(splits) if s == "val"] == [0, 10, 20] and len(splits) == 25


def test_jsonl_lines_give_their_field_and_refusals_name_the_line(tmp_path):
    path = tmp_path / "notes.jsonl"
    path.write_text('{"text": " one "}\n\n{"text": "x"}\n{"body": "two", "text": "two"}\n', encoding="utf-8")
    assert _texts(Corpus(str(path))) == ["one", "two"]  # blank lines skipped, a 1-character document dropped
    path.write_text('{"text": "one"}\n{"body": "two"}\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        _texts(Corpus(str(path)))
    assert caught.value.field == "text_field" and "line 2 has no string 'text'" in str(caught.value)
    path.write_text('{"text": "one"}\nnot json\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="line 2 is not JSON"):
        _texts(Corpus(str(path)))


def test_a_byte_that_is_not_utf8_is_named_by_its_offset_in_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "BLOCK", 3)
    path = tmp_path / "notes.txt"
    good = "héllo\n\nwörld ".encode()
    path.write_bytes(good + b"\xff rest")
    with pytest.raises(ConfigError, match=f"byte {len(good)} is not UTF-8"):
        _texts(Corpus(str(path)))


def test_a_document_over_the_limit_is_refused_not_the_corpus(tmp_path):
    many = tmp_path / "many.txt"
    many.write_text(("words " * 40 + "\n\n") * 10_000)  # 2.4 MB of short paragraphs
    assert len(_texts(Corpus(str(many), max_mb=1))) == 10_000
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"text": "x" * (1 << 20)}) + "\n" + json.dumps({"text": "yy"}) + "\n")
    with pytest.raises(ConfigError, match="lines of at most 1 MB each: line 1 is longer"):
        _texts(Corpus(str(one), max_mb=1))


@pytest.mark.parametrize("named", ["folder", "glob"])
def test_shards_read_in_sorted_order_are_one_file(tmp_path, named):
    documents = [f"document {i} " + "word " * i for i in range(30)]
    whole = tmp_path / "whole.txt"
    whole.write_text("\n\n".join(documents), encoding="utf-8")
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "b.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in documents[10:20]))
    (shards / "a.txt").write_text("\n\n".join(documents[:10]), encoding="utf-8")
    (shards / "c.txt").write_text("\n\n".join(documents[20:]), encoding="utf-8")
    (shards / "notes.md").write_text("not a shard")
    source = Corpus(str(shards) if named == "folder" else str(shards / "*.*[tl]"))
    assert [p.rsplit("/", 1)[1] for p in source.paths] == ["a.txt", "b.jsonl", "c.txt"]
    assert list(source.documents()) == list(Corpus(str(whole)).documents())
    assert source.total_bytes == sum((shards / n).stat().st_size for n in ("a.txt", "b.jsonl", "c.txt"))


def test_a_shard_that_cannot_be_read_is_named(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "a.txt").write_text("one\n\ntwo")
    (shards / "b.txt").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError) as caught:
        _texts(Corpus(str(shards)))
    assert f"(in {shards / 'b.txt'}: text_file is a directory of shards)" in str(caught.value)
    with pytest.raises(ConfigError, match="this glob matches no file"):
        Corpus(str(tmp_path / "*.nothing"))


def test_the_identity_follows_each_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("one\n\ntwo")
    before = Corpus(str(path)).identity()
    assert before["files"][0][:2] == [str(path.resolve()), 8] and before["text_field"] == "text"
    path.write_text("one\n\nthree")
    assert Corpus(str(path)).identity() != before
    assert Corpus(str(path), field="body").identity() != Corpus(str(path)).identity()

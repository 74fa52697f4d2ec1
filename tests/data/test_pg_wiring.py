"""pg's settings and sources: its four field names (refused in one line when two coincide), group-mean-token-mean
allowed for pg alone, every field in the token cache's identity, and a parquet folder's rows (advantages as numbers,
groups as integers) read as the same .jsonl records, held out by group."""

from __future__ import annotations

import json

import pytest

from gaccum_core.config import ConfigError, RunConfig, applies
from gaccum_core.data.records import BUNDLED
from gaccum_core.data.text import corpus_name, text_sources

SEQ = 48
LINES = (BUNDLED / "pg.jsonl").read_text(encoding="utf-8").splitlines()[:70]  # groups g000 to g011


@pytest.mark.parametrize("changes, field, allowed", [
    ({"dataset": "sft", "loss_agg": "group-mean-token-mean"}, "loss_agg", "its records have no prompt groups"),
    ({"loss_agg": "group-mean-token-mean", "reduction": "sum"}, "loss_agg", "token-mean with reduction sum"),
    ({"advantage_field": "prompt"}, "advantage_field", "a field other than prompt_field"),
    ({"group_field": "advantage"}, "group_field", "a field other than advantage_field"),
    ({"group_field": "a b"}, "group_field", "a JSON field name"),
])
def test_pg_settings_are_refused_in_one_line(changes, field, allowed):
    with pytest.raises(ConfigError) as refused:
        RunConfig(**{"model": "gpt", "dataset": "pg", **changes})
    assert refused.value.field == field and allowed in str(refused.value) and "\n" not in str(refused.value)


def test_group_mean_token_mean_applies_to_pg():
    config = RunConfig(model="gpt", dataset="pg", loss_agg="group-mean-token-mean", group_field="prompt_id")
    assert applies(config, "advantage_field") and applies(config, "loss_agg") and not applies(config, "text_field")


def _write(path, rename: dict[str, str]) -> str:
    path.write_text("\n".join(json.dumps({rename.get(k, k): v for k, v in json.loads(line).items()})
                              for line in LINES) + "\n", encoding="utf-8")
    return str(path)


def test_every_field_name_is_in_the_token_caches_identity(tmp_path, token_cache_dir):
    plain = RunConfig(model="gpt", dataset="pg", text_file=_write(tmp_path / "a.jsonl", {}))
    renamed = RunConfig(model="gpt", dataset="pg", text_file=_write(tmp_path / "b.jsonl", {"reward": "score"}),
                        advantage_field="reward")
    assert corpus_name(plain) != corpus_name(RunConfig(**{**plain.to_dict(), "advantage_field": "reward"}))
    assert corpus_name(plain) != corpus_name(RunConfig(**{**plain.to_dict(), "group_field": "reward"}))
    assert corpus_name(renamed) != corpus_name(RunConfig(**{**renamed.to_dict(), "advantage_field": "advantage"}))


def test_a_parquet_folders_rollouts_are_those_of_the_same_jsonl(tmp_path, token_cache_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [json.loads(line) for line in LINES]
    folder = tmp_path / "saved"
    folder.mkdir()
    pq.write_table(pa.table({"q": [r["prompt"] for r in records], "a": [r["completion"] for r in records],
                             "adv": [r["advantage"] for r in records],
                             "grp": [int(r["group"][1:]) for r in records],
                             "why": ["" for _ in records]}), folder / "part-0.parquet")
    fields = dict(prompt_field="q", completion_field="a", advantage_field="adv", group_field="grp")
    saved = text_sources(RunConfig(model="gpt", dataset="pg", data_dir=str(folder), max_seq_len=SEQ, **fields))
    jsonl = text_sources(RunConfig(model="gpt", dataset="pg", text_file=_write(tmp_path / "r.jsonl", {}),
                                   max_seq_len=SEQ))
    for mine, theirs in zip(saved, jsonl):  # train, then validation: the same records, held out by group
        every = list(range(len(theirs)))
        assert len(mine) == len(theirs) and all(a.equal(b) for a, b in zip(mine.batch(every), theirs.batch(every)))
        assert mine.token_advantages(every).equal(theirs.token_advantages(every))
    assert len(jsonl[1]) == sum(r["group"] in ("g000", "g010") for r in records)
    with pytest.raises(ConfigError) as refused:
        text_sources(RunConfig(model="gpt", dataset="pg", data_dir=str(folder), max_seq_len=SEQ,
                               **{**fields, "advantage_field": "why"}))
    assert refused.value.field == "advantage_field" and "a field of numbers" in str(refused.value)

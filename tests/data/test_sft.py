"""sft's records as sequences: the targets are IGNORE exactly on prompt positions and padding (padded and packed,
checked against a reference built here from the records' own bytes), packed rows never split a record, a record
left with no completion token has no loss token; the fields are refused in one line and key the token cache."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data.record_sequences import PackedRecords, PaddedRecords
from gaccum_core.data.text import corpus_name, text_sources

IGNORE = -100
SEQ = 16  # rows of 17 tokens
# (prompt, completion): an empty prompt, an empty completion, a completion cut by truncation, a prompt longer than a
# row (no completion token left), and short ones that pack together.
RECORDS = [("Q: 2+2? ", "4"), ("", "hello"), ("say nothing: ", ""), ("abc", "defghijklmnopqrstuvwxyz"),
           ("a prompt longer than the row", "lost"), ("x", "y"), ("pq", "rs"), ("Q: 3+3? ", "6"), ("m", "no")]


def _write(path, records, prompt="prompt", completion="completion", extra=None):
    lines = [json.dumps({prompt: p, completion: c, **(extra or {})}) for p, c in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _config(text_file, packing="off", **changes):
    return RunConfig(model="gpt", dataset="sft", text_file=text_file, max_seq_len=SEQ, packing=packing, **changes)


def _train_records():
    """The training records (every tenth, from the first, is held out) as (bytes with the ending 0, prompt length)."""
    return [(list(f"{p}{c}".encode()) + [0], len(p.encode())) for i, (p, c) in enumerate(RECORDS) if i % 10]


def _reference_row(records):
    """(tokens, is the token a loss token's target) of records placed one after another in a row."""
    tokens, counted = [], []
    for ids, prompt in records:
        kept = ids[:SEQ + 1]
        tokens += kept
        counted += [0 < j and j >= prompt for j in range(len(kept))]
    return tokens, counted


def _reference_targets(rows):
    width = max(len(tokens) for tokens, _ in rows) - 1
    return [[tokens[j + 1] if j + 1 < len(tokens) and counted[j + 1] else IGNORE for j in range(width)]
            for tokens, counted in rows]


def _reference_packing(records):
    """Greedy in order: a record that does not fit in what is left of the row starts the next."""
    rows, used = [], SEQ + 1
    for ids, prompt in records:
        if used + min(len(ids), SEQ + 1) > SEQ + 1:
            rows.append([])
            used = 0
        rows[-1].append((ids, prompt))
        used += min(len(ids), SEQ + 1)
    return rows


@pytest.mark.parametrize("packing", ["off", "on"])
def test_targets_are_ignore_exactly_on_prompts_and_padding(tmp_path, token_cache_dir, packing):
    train, _ = text_sources(_config(_write(tmp_path / "r.jsonl", RECORDS), packing))
    records = _train_records()
    groups = [[r] for r in records] if packing == "off" else _reference_packing(records)
    rows = [_reference_row(group) for group in groups]
    assert len(train) == len(rows)
    inputs, targets = train.batch(list(range(len(rows))))
    assert targets.tolist() == _reference_targets(rows)
    assert [tokens[:-1] for tokens, _ in rows] == [row[:len(tokens) - 1] for row, (tokens, _) in
                                                   zip(inputs.tolist(), rows)]
    counts = [sum(c) for _, c in rows]
    assert train.targets.tolist() == counts and train.total_targets == sum(counts)
    assert train.target_tokens(list(range(len(rows)))) == sum(counts) == int((targets != IGNORE).sum())
    assert not train.token_advantages(list(range(len(rows)))).any() and (train.sequence_groups == -1).all()  # pg's


def test_packed_rows_keep_whole_records_and_their_spans(tmp_path, token_cache_dir):
    train, _ = text_sources(_config(_write(tmp_path / "r.jsonl", RECORDS), "on"))
    groups = _reference_packing(_train_records())
    spans = train.spans(list(range(len(train))))
    expected = []
    for group in groups:
        start, row = 0, []
        for ids, prompt in group:
            kept = min(len(ids), SEQ + 1)
            row.append([start, start + kept, min(prompt, kept)])
            start += kept
        expected.append(row)
    assert [s.tolist() for s in spans] == expected
    assert any(len(row) > 1 for row in expected)  # records do share rows


def test_a_record_without_completion_tokens_after_truncation_has_no_loss_token(tmp_path, token_cache_dir):
    train, _ = text_sources(_config(_write(tmp_path / "r.jsonl", RECORDS)))
    assert RECORDS[4][0] == "a prompt longer than the row"  # training record 3 (record 0 is held out)
    _, targets = train.batch([3])
    assert train.target_tokens([3]) == 0 and (targets == IGNORE).all()
    assert len(train) == len(_train_records())  # it still takes its place as a sample


def test_a_record_missing_a_field_is_refused_naming_the_field_and_the_line(tmp_path, token_cache_dir):
    path = tmp_path / "r.jsonl"
    _write(path, RECORDS)
    lines = path.read_text().splitlines()
    lines[2] = json.dumps({"prompt": "no completion here"})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as refused:
        text_sources(_config(str(path)))
    assert refused.value.field == "completion_field"
    message = str(refused.value)
    assert "line 3 has no string 'completion'" in message and "\n" not in message


def test_the_field_names_key_the_token_cache(tmp_path, token_cache_dir):
    path = _write(tmp_path / "r.jsonl", RECORDS, extra={"question": "other"})
    assert corpus_name(_config(path)) != corpus_name(_config(path, prompt_field="question"))
    assert corpus_name(_config(path)) != corpus_name(_config(path, completion_field="question"))


@pytest.mark.parametrize("changes, field, allowed", [
    ({"loss_agg": "seq-mean-token-mean", "reduction": "sum"}, "loss_agg", "token-mean with reduction sum"),
    ({"loss_agg": "group-mean-token-mean"}, "loss_agg", "its records have no prompt groups"),
    ({"loss_agg_norm": -1}, "loss_agg_norm", "an integer from 0"),
    ({"completion_field": "prompt"}, "completion_field", "a field other than prompt_field"),
    ({"prompt_field": "a b"}, "prompt_field", "a JSON field name"),
])
def test_the_new_settings_are_refused_in_one_line(changes, field, allowed):
    with pytest.raises(ConfigError) as refused:
        RunConfig(model="gpt", dataset="sft", **changes)
    assert refused.value.field == field and allowed in str(refused.value) and "\n" not in str(refused.value)


def test_loss_agg_applies_to_sft_alone():
    with pytest.raises(ConfigError, match="the aggregation modes apply to sft"):
        RunConfig(model="gpt", dataset="pydoc", loss_agg="seq-mean-token-mean")


def test_records_from_a_parquet_folder_are_those_of_the_same_jsonl(tmp_path, token_cache_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "saved"
    folder.mkdir()
    columns = {"question": [p for p, _ in RECORDS], "answer": [c for _, c in RECORDS]}
    pq.write_table(pa.table(columns), folder / "part-0.parquet")
    fields = dict(prompt_field="question", completion_field="answer")
    saved, _ = text_sources(RunConfig(model="gpt", dataset="sft", data_dir=str(folder), max_seq_len=SEQ, **fields))
    jsonl, _ = text_sources(_config(_write(tmp_path / "r.jsonl", RECORDS, "question", "answer"), **fields))
    every = list(range(len(jsonl)))
    assert len(saved) == len(jsonl) and all(a.equal(b) for a, b in zip(saved.batch(every), jsonl.batch(every)))
    with pytest.raises(ConfigError) as refused:
        text_sources(RunConfig(model="gpt", dataset="sft", data_dir=str(folder), max_seq_len=SEQ))
    assert refused.value.field == "prompt_field" and "'question', 'answer'" in str(refused.value)


def test_a_model_tokenizer_ends_each_record_with_eos_after_its_prompt_and_completion():
    from hfmodels import _tokenizer

    from gaccum_core.data.tokens import ModelTokens

    tokens = ModelTokens(_tokenizer(), "bpe")
    records = [("What is 2 + 2? ", "4."), ("", "only a completion"), ("a prompt, no completion", "")]
    for (prompt, completion), (ids, length) in zip(records, tokens.encode_records(records)):
        ids = ids.tolist()
        assert ids[-1] == tokens.eos and tokens.eos not in ids[:-1]
        assert tokens.decode(ids[:length]) == prompt and tokens.decode(ids[length:-1]) == completion


@pytest.mark.parametrize("kind", [PaddedRecords, PackedRecords], ids=["padded", "packed"])
def test_each_loss_token_is_read_as_its_records_by_the_one_rule(kind):
    """loss_owners and at_loss_tokens (built in array operations) against the rule written record by record: record
    r's targets from max(p_r, 1) - 1 to L_r - 1 at its offset in its row, for random records (some of one token,
    some with no completion, some truncated) and random rows."""
    rng = np.random.default_rng(0)
    for _ in range(100):
        lengths, prompts = rng.integers(1, 20, 30), rng.integers(0, 8, 30)
        starts = np.cumsum(lengths) - lengths
        data = kind(rng.integers(0, 50, lengths.sum()), np.stack([starts, starts + lengths], 1), prompts,
                    int(rng.integers(3, 30)), 0)
        indices = torch.from_numpy(rng.integers(0, len(data), rng.integers(1, 6)))
        width = data.batch(indices)[1].shape[1] + int(rng.integers(0, 3))
        expected = torch.full((len(indices), width), -1, dtype=torch.long)
        for n, row in enumerate(data._rows_at(indices)):
            offset = 0
            for r in row:
                kept, first = int(data.kept[r]), max(int(data.prompts[r]), 1)
                expected[n, offset + first - 1:offset + kept - 1] = r if kept > first else -1
                offset += kept
        assert torch.equal(data.loss_owners(indices, width), expected)
        spread = data.at_loss_tokens(indices, width, lambda records: records * 10.0 + 1)
        assert torch.equal(spread, torch.where(expected >= 0, expected * 10.0 + 1, 0.0))

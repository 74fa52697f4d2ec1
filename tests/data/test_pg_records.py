"""pg's rollouts as sequences (data side): the held-out split goes by group, each loss token carries its record's
advantage beside the targets (0 elsewhere), the token cache keeps groups and advantages, a group-aware epoch order
keeps a group's sequences together; a record without a numeric advantage is refused naming the field and line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gaccum_core.config import ConfigError
from gaccum_core.data.record_sequences import PackedRecords, PaddedRecords, grouped_order
from gaccum_core.data.records import BUNDLED, PgCorpus
from gaccum_core.data.token_cache import open_cache, tokenise_in_memory
from gaccum_core.data.tokens import ByteTokens

IGNORE = -100
SEQ = 96
FIELDS = (("prompt_field", "prompt"), ("completion_field", "completion"), ("advantage_field", "advantage"),
          ("group_field", "group"))
PG = BUNDLED / "pg.jsonl"


def _records() -> list[dict]:
    return [json.loads(line) for line in PG.read_text(encoding="utf-8").splitlines()]


def _held_out_groups() -> set[str]:
    order = list(dict.fromkeys(r["group"] for r in _records()))
    return set(order[::10])


def _train(kind, cache):
    ids, spans = cache.splits["train"]
    columns = cache.columns["train"]
    return kind(ids, spans, columns["prompts"], SEQ, 0, columns["groups"], columns["advantages"])


@pytest.fixture(scope="module")
def cache():
    return tokenise_in_memory(PgCorpus(str(PG), FIELDS).documents(), ByteTokens())


def test_the_held_out_split_goes_by_group(cache):
    held = _held_out_groups()
    records = _records()
    assert cache.meta["documents"] == {"val": sum(r["group"] in held for r in records),
                                       "train": sum(r["group"] not in held for r in records)}
    train, val = set(cache.columns["train"]["groups"].tolist()), set(cache.columns["val"]["groups"].tolist())
    assert not train & val and len(val) == len(held)


@pytest.mark.parametrize("kind", [PaddedRecords, PackedRecords])
def test_each_loss_token_carries_its_records_advantage(cache, kind):
    train = _train(kind, cache)
    every = list(range(len(train)))
    _, targets = train.batch(every)
    advantages = train.token_advantages(every)
    assert advantages.shape == targets.shape and (advantages[targets == IGNORE] == 0).all()
    expected = []  # the training records' advantages, one per loss token, in order
    for record in (r for r in _records() if r["group"] not in _held_out_groups()):
        kept = min(len((record["prompt"] + record["completion"]).encode()) + 1, SEQ + 1)
        expected += [record["advantage"]] * max(kept - max(len(record["prompt"].encode()), 1), 0)
    found = advantages[targets != IGNORE]
    assert len(found) == len(expected) and torch.allclose(found, torch.tensor(expected, dtype=torch.float32))


def test_the_token_cache_keeps_groups_and_advantages(cache, tmp_path):
    on_disk = open_cache(tmp_path, PgCorpus(str(PG), FIELDS), ByteTokens())
    for split in ("train", "val"):
        for name in ("prompts", "groups", "advantages"):
            assert np.array_equal(on_disk.columns[split][name], cache.columns[split][name])


def test_a_group_aware_order_keeps_each_group_together(cache):
    groups = _train(PaddedRecords, cache).sequence_groups
    distinct = np.unique(groups)
    permutation = torch.randperm(len(distinct), generator=torch.Generator().manual_seed(3))
    order = grouped_order(groups, permutation).numpy()
    assert sorted(order.tolist()) == list(range(len(groups)))
    seen = groups[order]
    runs = [g for i, g in enumerate(seen) if i == 0 or g != seen[i - 1]]
    assert runs == distinct[permutation.numpy()].tolist()  # one run per group, in the permutation's order
    for g in distinct:  # each group's own order kept
        assert np.all(np.diff(order[seen == g]) > 0)


def test_a_record_without_a_numeric_advantage_is_refused(tmp_path):
    path = tmp_path / "pg.jsonl"
    lines = PG.read_text(encoding="utf-8").splitlines()[:4]
    lines[2] = json.dumps({**json.loads(lines[2]), "advantage": "high"})
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        list(PgCorpus(str(path), FIELDS).documents())
    assert refused.value.field == "advantage_field" and "line 3 has 'high'" in str(refused.value)

"""The records tasks' test data, shared by the oracles and the spawned DDP and FSDP2 launches: a few of the bundled
sft records (short, long, one left without completion tokens) and of the bundled pg rollouts (whole groups), each
written to a JSONL file once per module, and the configs that read them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.data.records import BUNDLED

SFT_SEQ = 64
RECORDS = 22  # 19 for training (every tenth held out)
PG_SEQ = 128
GROUPS = 5  # g000 (held out: every tenth group) to g004: 20 training records in groups of 6, 6, 4 and 4, up to
# 136 bytes with their end (the longest cut by truncation to PG_SEQ + 1); packed, 15 rows
_QUIET = dict(model="gpt", device="cpu", eval_every=10**9, eval_batches=1, checkpoint_every=0, no_dropout=True,
              tensorboard="off")


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> str:
    """22 of the bundled records: short ones (rows hold several when packed) and, at 5, 12 and 20, ones longer
    than a row, cut by truncation (one with a prompt longer than a row: no completion token left)."""
    lines = (BUNDLED / "sft.jsonl").read_text(encoding="utf-8").splitlines()
    size = [len(json.loads(line)["prompt"] + json.loads(line)["completion"]) for line in lines]
    short = [line for line, n in zip(lines, size) if n <= 31][:RECORDS - 3]
    prompt_only = next(line for line in lines if len(json.loads(line)["prompt"]) > SFT_SEQ + 1)
    long = [line for line, n in zip(lines, size) if n > 2 * SFT_SEQ and line != prompt_only][:2]
    for at, line in zip((5, 12, 20), (prompt_only, *long)):
        short.insert(at, line)
    path = tmp_path_factory.mktemp("sft") / "records.jsonl"
    path.write_text("\n".join(short) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory) -> str:
    """The bundled rollouts of the first GROUPS groups (records longer than PG_SEQ + 1 tokens among them)."""
    lines = [line for line in (BUNDLED / "pg.jsonl").read_text(encoding="utf-8").splitlines()
             if int(json.loads(line)["group"][1:]) < GROUPS]
    path = tmp_path_factory.mktemp("pg") / "rollouts.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def sft(text_file: str, **changes) -> RunConfig:
    """sft on text_file at SFT_SEQ, SGD, no evaluation, checkpoint or dropout: changes on top."""
    return RunConfig(**{**_QUIET, "dataset": "sft", "text_file": text_file, "max_seq_len": SFT_SEQ,
                        "optimizer": "sgd", "lr": 0.5, **changes})


def pg(text_file: str, **changes) -> RunConfig:
    """pg on text_file at PG_SEQ by group-mean-token-mean, SGD, no evaluation, checkpoint or dropout: changes on top."""
    return RunConfig(**{**_QUIET, "dataset": "pg", "text_file": text_file, "max_seq_len": PG_SEQ,
                        "optimizer": "sgd", "lr": 0.1, "loss_agg": "group-mean-token-mean", **changes})


def loss_tokens(record: dict, seq: int) -> int:
    """A record's loss tokens with gpt's byte tokens, from its text alone: its completion's bytes and the ending 0, its
    row cut to seq + 1 tokens (a record's first token is predicted by none)."""
    prompt = len(record["prompt"].encode())
    kept = min(len((record["prompt"] + record["completion"]).encode()) + 1, seq + 1)
    return max(kept - max(prompt, 1), 0)


def rendered_get_batch(train, fields: tuple[str, ...]):
    """get_batch as the rendered loop's comment describes it (lab.loopcode_records.batch_doc), from the data set's
    own records: x, y, then each loss token's record, advantage or group as `fields` asks."""
    record_groups = torch.tensor(np.asarray(train.groups if train.groups is not None else []), dtype=torch.long)

    def get_batch(indices):
        x, y = train.batch(indices)
        record = train.loss_owners(indices, y.shape[1])
        extra = {"record": record, "advantage": lambda: train.token_advantages(indices, y.shape[1]),
                 "group": lambda: torch.where(record >= 0, record_groups[record.clamp(min=0)], -1)}
        return (x, y, *(extra[name]() if callable(extra[name]) else extra[name] for name in fields[2:]))
    return get_batch

"""What sft and pg runs count and evaluate (issue 43): tokens seen, each step's tokens and tokens/s count loss tokens
(a record's completion tokens and its end, never its prompt or padding), whatever the aggregation; the evaluation is
the mean cross-entropy over the held-out records' loss tokens (pg: without advantages), each counted here from the
records' text with gpt's byte tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from gaccum_core.train import engine
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper
from records_data import PG_SEQ, SFT_SEQ, loss_tokens, pg, records, rollouts, sft  # noqa: F401  (the fixtures)


@pytest.fixture(autouse=True)
def no_sample(monkeypatch):
    monkeypatch.setattr(engine, "sample_text", lambda *args: "")  # the last evaluation's greedy sample: seconds


def _split(text_file: str, dataset: str) -> tuple[list[dict], list[dict]]:
    """(training, held-out) records: every tenth record held out for sft, every tenth group (by first appearance,
    g000 first) for pg."""
    found = [json.loads(line) for line in Path(text_file).read_text(encoding="utf-8").splitlines()]
    groups = list(dict.fromkeys(r["group"] for r in found)) if dataset == "pg" else []
    held = [(groups.index(r["group"]) if groups else i) % 10 == 0 for i, r in enumerate(found)]
    return [r for r, h in zip(found, held) if not h], [r for r, h in zip(found, held) if h]


def _held_out_loss(model: torch.nn.Module, held_out: list[dict], seq: int) -> tuple[float, int]:
    """The mean cross-entropy over the held-out records' loss tokens, one record at a time, and their count."""
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for record in held_out:
            prompt = len(record["prompt"].encode())
            tokens = torch.tensor([*(record["prompt"] + record["completion"]).encode(), 0][:seq + 1])
            first = max(prompt, 1) - 1  # the first target that predicts a completion token
            if first >= len(tokens) - 1:
                continue
            logits = model(tokens[None, :-1])[0, first:]
            total += F.cross_entropy(logits.float(), tokens[first + 1:], reduction="sum").item()
            count += len(tokens) - 1 - first
    return total / count, count


@pytest.mark.parametrize("task", ["sft", "pg"])
def test_tokens_count_loss_tokens_and_evaluation_is_the_held_out_records_loss(records, rollouts, token_cache_dir,
                                                                               task):
    text_file, seq = (records, SFT_SEQ) if task == "sft" else (rollouts, PG_SEQ)
    make = sft if task == "sft" else pg  # pg by group-mean-token-mean, sft by seq-mean-token-mean: weighted windows
    config = make(text_file, micro_batch_size=2, accum_steps=3, eval_batches=0,
                  **({"loss_agg": "seq-mean-token-mean"} if task == "sft" else {}))
    run, rows = Engine(config), RowKeeper()
    run.run(rows)
    training, held_out = _split(text_file, task)
    assert rows.steps[-1]["tokens_seen"] == sum(loss_tokens(r, seq) for r in training)  # one epoch: each record once
    assert sum(r["tokens"] for r in rows.steps) == rows.steps[-1]["tokens_seen"]
    assert all(r["tokens_per_s"] == pytest.approx(r["tokens"] / r["step_time_s"]) for r in rows.steps)
    loss, count = _held_out_loss(run.model, held_out, seq)
    assert rows.evals[-1]["eval_tokens"] == count > 0
    assert rows.evals[-1]["test_loss"] == pytest.approx(loss, rel=1e-5)

"""sft on the engine: b·k accumulated (reduction mean) equals one batch of b·k on the same records, padded and
packed, a partial last window included; the textbook mean_per_micro_batch does not. The loss counts completion
tokens only: a step's tokens are the window's completion targets, counted here from the records' own bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.data.records import BUNDLED
from gaccum_core.train import engine
from training import trained

SEQ = 64
RECORDS = 22  # 19 for training (every tenth held out)


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> str:
    """22 of the bundled records: short ones (rows hold several when packed) and, at 5, 12 and 20, ones longer
    than a row, cut by truncation (one with a prompt longer than a row: no completion token left)."""
    lines = (BUNDLED / "sft.jsonl").read_text(encoding="utf-8").splitlines()
    size = [len(json.loads(line)["prompt"] + json.loads(line)["completion"]) for line in lines]
    short = [line for line, n in zip(lines, size) if n <= 31][:RECORDS - 3]
    prompt_only = next(line for line in lines if len(json.loads(line)["prompt"]) > SEQ + 1)
    long = [line for line, n in zip(lines, size) if n > 2 * SEQ and line != prompt_only][:2]
    for at, line in zip((5, 12, 20), (prompt_only, *long)):
        short.insert(at, line)
    path = tmp_path_factory.mktemp("sft") / "records.jsonl"
    path.write_text("\n".join(short) + "\n", encoding="utf-8")
    return str(path)


def sft(text_file: str, **changes) -> RunConfig:
    values = dict(model="gpt", dataset="sft", text_file=text_file, max_seq_len=SEQ, device="cpu", optimizer="sgd",
                  lr=0.5, eval_every=10**9, eval_batches=1, checkpoint_every=0, no_dropout=True, tensorboard="off")
    return RunConfig(**{**values, **changes})


def _completion_targets(text_file: str) -> int:
    """Loss tokens of the training records, from their bytes: the completion and its ending 0, cut to SEQ + 1."""
    total = 0
    for i, line in enumerate(Path(text_file).read_text(encoding="utf-8").splitlines()):
        record = json.loads(line)
        prompt, kept = len(record["prompt"].encode()), min(len((record["prompt"] + record["completion"]).encode())
                                                           + 1, SEQ + 1)
        total += max(kept - max(prompt, 1), 0) if i % 10 else 0
    return total


@pytest.mark.parametrize("packing", ["off", "on"])
def test_accumulated_sft_equals_one_big_batch_and_the_textbook_does_not(records, token_cache_dir, packing,
                                                                         monkeypatch):
    monkeypatch.setattr(engine, "sample_text", lambda *args: "")  # the last evaluation's greedy sample: seconds
    runs = {name: trained(sft(records, packing=packing, micro_batch_size=b, accum_steps=k, reduction=reduction))
            for name, (b, k, reduction) in {"accumulated": (2, 4, "mean"), "big": (8, 1, "mean"),
                                            "textbook": (2, 4, "mean_per_micro_batch")}.items()}
    (accumulated, rows), (big, big_rows), (textbook, _) = runs["accumulated"], runs["big"], runs["textbook"]
    # 19 training records: padded, windows of 8, 8 and 3; packed two or so to a row, 11 rows: windows of 8 and 3
    assert [r["samples"] for r in rows.steps] == {"off": [8, 8, 3], "on": [8, 3]}[packing]
    exact = (accumulated - big).abs().max().item()
    drift = (textbook - big).abs().max().item()
    assert exact <= 1e-6, f"accumulated vs one big batch: {exact:.2e}"
    assert drift > 1000 * max(exact, 1e-9), f"textbook {drift:.2e} vs exact {exact:.2e}"
    assert [r["tokens"] for r in rows.steps] == [r["tokens"] for r in big_rows.steps]
    assert rows.steps[-1]["tokens_seen"] == _completion_targets(records)

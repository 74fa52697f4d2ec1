"""sft on the engine: b·k accumulated (reduction mean) equals one batch of b·k on the same records, padded and
packed, a partial last window included; the textbook mean_per_micro_batch does not. The loss counts completion
tokens only: a step's tokens are the window's completion targets, counted here from the records' own bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gaccum_core.train import engine
from records_data import SFT_SEQ as SEQ, loss_tokens, records, sft  # noqa: F401  (the records fixture)
from training import trained

def _completion_targets(text_file: str) -> int:
    """Loss tokens of the training records, from their bytes: the completion and its ending 0, cut to SEQ + 1."""
    lines = Path(text_file).read_text(encoding="utf-8").splitlines()
    return sum(loss_tokens(json.loads(line), SEQ) for i, line in enumerate(lines) if i % 10)  # every tenth held out


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

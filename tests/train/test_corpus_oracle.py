"""Training on a cached corpus against its oracles: one big batch on the same sequences (packed and padded), and
the same run on sequences cut from the text in memory by the plain rule, as every run read text before the cache."""

import re

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.data.sources import DataBundle
from gaccum_core.data.text import IGNORE, text_sources
from gaccum_core.data.tokens import ByteTokens
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper
from training import trained


class PlainSequences:
    """The text data set as it was read before the token cache: every chunk a tensor, padded per batch."""

    def __init__(self, chunks: list[list[int]]) -> None:
        self.chunks = [torch.tensor(c) for c in chunks]

    def __len__(self) -> int:
        return len(self.chunks)

    def target_tokens(self, indices: torch.Tensor) -> int:
        return sum(len(self.chunks[int(i)]) - 1 for i in indices)

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = [self.chunks[int(i)] for i in indices]
        width = max(len(r) for r in rows) - 1
        inputs = torch.zeros((len(rows), width), dtype=torch.long)
        targets = torch.full((len(rows), width), IGNORE, dtype=torch.long)
        for n, row in enumerate(rows):
            inputs[n, :len(row) - 1], targets[n, :len(row) - 1] = row[:-1], row[1:]
        return inputs, targets


def _plain_chunks(text: str, max_seq_len: int, held_out: bool) -> list[list[int]]:
    """Paragraphs as bytes, every tenth from the first held out, each cut into pieces of max_seq_len + 1."""
    documents = [list(p.strip().encode()) for p in re.split(r"\n\s*\n", text) if len(p.strip()) >= 2]
    size = max_seq_len + 1
    mine = [d for i, d in enumerate(documents) if (i % 10 == 0) == held_out]
    return [p for p in (d[i:i + size] for d in mine for i in range(0, len(d), size)) if len(p) >= 2]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """40 paragraphs of many lengths, tokenised into a cache of the module's own."""
    folder = tmp_path_factory.mktemp("corpus")
    path = folder / "notes.txt"
    path.write_text("\n\n".join(f"Paragraph {i}: " + "words and more words " * (1 + (7 * i) % 23) for i in range(40)),
                    encoding="utf-8")
    return path, folder / "cache"


def _lm(corpus, **changes) -> RunConfig:
    path, cache = corpus
    values = dict(model="gpt", dataset="text", text_file=str(path), cache_dir=str(cache), max_seq_len=32,
                  device="cpu", optimizer="sgd", lr=0.05, eval_every=10**9, checkpoint_every=0, max_steps=4)
    return RunConfig(**{**values, **changes})


@pytest.mark.parametrize("packing", ["off", "on"])
def test_accumulated_equals_one_big_batch_on_a_cached_corpus(corpus, packing):
    accumulated, rows = trained(_lm(corpus, packing=packing, micro_batch_size=2, accum_steps=4))
    big, big_rows = trained(_lm(corpus, packing=packing, micro_batch_size=8, accum_steps=1))
    torch.testing.assert_close(accumulated, big, rtol=0, atol=1e-5)
    tokens = [r["tokens"] for r in rows.steps]
    assert tokens == [r["tokens"] for r in big_rows.steps] and len(tokens) == 4
    if packing == "on":
        assert tokens == [8 * 32] * 4  # every window full
    else:
        assert len(set(tokens)) > 1  # padded documents: windows of different token counts


def test_a_run_on_the_cached_corpus_equals_one_on_the_text_chunked_in_memory(corpus):
    config = _lm(corpus, micro_batch_size=2, accum_steps=3, max_steps=5)
    cached, _ = trained(config)
    text = corpus[0].read_text(encoding="utf-8")
    train, test = (PlainSequences(_plain_chunks(text, 32, held_out)) for held_out in (False, True))
    assert len(train) == len(text_sources(config)[0])
    engine = Engine(config)
    engine.data = DataBundle("text", train, test, 256, (32,), ByteTokens())
    engine.run(RowKeeper())
    in_memory = torch.cat([p.detach().flatten() for p in engine.model.parameters()])
    assert torch.equal(cached, in_memory)

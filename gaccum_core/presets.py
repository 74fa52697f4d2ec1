"""The gpt presets by size: one table of shapes, with each shape's parameter count.

Shared vocabulary: the config validates gpt_preset and max_seq_len against it, models builds from
it, and the pages and the help text describe presets with its figures.
"""

from __future__ import annotations

from dataclasses import dataclass

VOCAB = 256  # byte-level: one token per byte


@dataclass(frozen=True)
class GPTShape:
    """Layers, heads, width and the longest sequence a preset embeds."""

    layers: int
    heads: int
    width: int
    max_len: int

    @property
    def parameters(self) -> int:
        """Parameters of a gpt of this shape (the head is tied to the token embedding): per block
        attention 4w² + 4w, MLP 8w² + 5w, two LayerNorms 4w; embeddings (256 + positions)·w; final LayerNorm 2w."""
        w = self.width
        return self.layers * (12 * w * w + 13 * w) + (VOCAB + self.max_len) * w + 2 * w


GPT_PRESETS = {
    "tiny": GPTShape(2, 2, 64, 256),       # tests and the CPU
    "mini": GPTShape(4, 4, 128, 512),
    "small": GPTShape(6, 6, 384, 1024),
    "gpt2": GPTShape(12, 12, 768, 1024),   # GPT-2 small's shape, with a byte vocabulary
}


def millions(count: int) -> str:
    """0.13 M, 0.89 M, 11.1 M, 86 M."""
    value = count / 1e6
    return f"{value:.2g} M" if value < 1 else f"{value:.3g} M"


def preset_words(name: str) -> str:
    """'tiny (0.13 M parameters)': a preset as help text and labels name it."""
    return f"{name} ({millions(GPT_PRESETS[name].parameters)} parameters)"

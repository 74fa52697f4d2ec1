"""A cell in words: the settings its grid sets, as the run labels say them (b=8 k=8, bf16, compile=default).
Pure."""

from __future__ import annotations

from typing import Any

from gaccum_core.config import short_word
from gaccum_core.sweeps.spec import Cell, SweepSpec
from gaccum_core.words import plural


def setting_words(field: str, value: Any) -> str:
    """One setting as a label says it: b=8, fp32 (amp off), bf16, reduction=mean, compile=default."""
    if field == "amp":
        return "fp32" if value == "off" else str(value)
    return f"{short_word(field)}={value}"


def cell_label(cell: Cell, spec: SweepSpec) -> str:
    """The cell's crossed settings in words, b with its derived k: 'b=8 k=8 bf16 reduction=mean'."""
    words = []
    for field, value in cell.settings:
        words.append(setting_words(field, value))
        if field == "micro_batch_size" and spec.effective_batch is not None:
            words.append(setting_words("accum_steps", cell.config.accum_steps))
    return " ".join(words) or "the one cell"


def describe_sweep(spec: SweepSpec) -> str:
    """The sweep in a line: 'cnn on digits, E=64: b × reduction, 2 repeats (8 runs)'."""
    common = dict(spec.common)
    what = f"{common.get('model', '?')} on {common.get('dataset', '?')}"
    batch = f", E={spec.effective_batch}" if spec.effective_batch is not None else ""
    crossed = " × ".join(short_word(f) for f in spec.fields) or "one cell"
    repeats = plural(spec.repeats, "repeat") + (" (same seed)" if spec.same_seed else "")
    return f"{what}{batch}: {crossed}, {repeats} ({spec.cell_count * spec.repeats} runs)"

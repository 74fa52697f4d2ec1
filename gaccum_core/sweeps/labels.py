"""A cell in words: the settings its grid sets, in the run labels' words (gaccum_core.runs.labels: b=8 k=8, bf16,
fp32, ckpt/full, compile=default). Pure."""

from __future__ import annotations

from gaccum_core.config import short_word
from gaccum_core.runs.labels import setting_text
from gaccum_core.sweeps.spec import Cell, SweepSpec
from gaccum_core.words import plural


def cell_label(cell: Cell, spec: SweepSpec) -> str:
    """The cell's crossed settings in words, b with its derived k: 'b=8 k=8 bf16 reduction=mean'; amp off is fp32
    here, where the cells differ in precision."""
    words = []
    for field, _ in cell.settings:
        words.append(setting_text(field, cell.config))
        if field == "micro_batch_size" and spec.effective_batch is not None:
            words.append(setting_text("accum_steps", cell.config))
    return " ".join(dict.fromkeys(words)) or "the one cell"  # sharding and fsdp_sync crossed: fsdp/last, once


def describe_sweep(spec: SweepSpec) -> str:
    """The sweep in a line: 'cnn on digits, E=64: b × reduction, 2 repeats (8 runs)'."""
    common = dict(spec.common)
    what = f"{common.get('model', '?')} on {common.get('dataset', '?')}"
    batch = f", E={spec.effective_batch}" if spec.effective_batch is not None else ""
    crossed = " × ".join(short_word(f) for f in spec.fields) or "one cell"
    repeats = plural(spec.repeats, "repeat") + (" (same seed)" if spec.same_seed else "")
    return f"{what}{batch}: {crossed}, {repeats} ({spec.cell_count * spec.repeats} runs)"

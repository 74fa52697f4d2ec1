"""A language run's generated samples as the Train page shows them: readable whatever the model wrote. A
continuation of nothing but line breaks and spaces (early in training a model often writes just that) would draw
a tall blank box; it is said in words instead, and long runs of blank lines fold to one. Pure: text in, text out."""

from __future__ import annotations

import re

_BLANK_LINES = re.compile(r"\n[ \t]*(?:\n[ \t]*){2,}")  # three line breaks or more, blanks between them


def _whitespace_words(text: str) -> str:
    """'only whitespace: 37 line breaks, 2 spaces' (what there is of it), or 'nothing' for an empty text."""
    if not text:
        return "nothing: an empty continuation"
    counts = [(text.count("\n"), "line break"), (text.count(" "), "space"), (text.count("\t"), "tab")]
    others = len(text) - sum(n for n, _ in counts)
    counts.append((others, "other blank character"))
    parts = [f"{n} {name}{'s' * (n != 1)}" for n, name in counts if n]
    return "only whitespace: " + ", ".join(parts)


def readable_sample(text: str) -> str:
    """The sample for a code block: as written, with three or more line breaks in a row folded to two and the
    trailing whitespace dropped; a whitespace-only sample as words in parentheses."""
    if not text.strip():
        return f"({_whitespace_words(text)})"
    return _BLANK_LINES.sub("\n\n", text).rstrip()


def sample_line(step: int, text: str, width: int) -> str:
    """One evaluation's sample on one line: 'step  40: text↵more' (line breaks as ↵), whitespace-only in words."""
    shown = f"({_whitespace_words(text)})" if not text.strip() else text.replace("\n", "↵")
    return f"step {step:>{width}}: {shown}"

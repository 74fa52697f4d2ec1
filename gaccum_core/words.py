"""Words for messages: a foreign error's first line, a count with its noun, every one of a count."""

from __future__ import annotations


def first_line(exc: BaseException, limit: int = 200) -> str:
    """'TypeName: the first line of its message' (at most limit characters): a foreign error inside a one-line message."""
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text[:limit]}" if text else type(exc).__name__


def plural(count: int, noun: str) -> str:
    """'1 selected run', '2 selected runs': a count and its noun (plural with an s)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def all_of(count: int, noun: str) -> str:
    """'the one module', 'both modules', 'all 3 modules': every one of a count, in words."""
    return f"the one {noun}" if count == 1 else f"both {noun}s" if count == 2 else f"all {count} {noun}s"

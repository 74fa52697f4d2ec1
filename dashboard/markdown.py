"""Text shown as typed where Streamlit renders Markdown (progress lines, captions, alerts, button labels)."""

from __future__ import annotations

import re

# Signs Markdown reads anywhere in a line (a ':' before a letter starts Streamlit's :red[…]), and a line's
# first sign that starts a heading, quote, list or rule.
_INLINE = re.compile(r"([\\`*_\[\]<~$&|]|:(?=[A-Za-z]))")
_LINE_START = re.compile(r"^(\s*(?:\d+(?=[.)](?:\s|$)))?)([>#+.)=-])")
# Words Streamlit's Markdown turns into something else whatever their escapes (it also reads the text after
# escapes are undone): a bare link (http://, www., an e-mail address), an emoji (:smile:), an icon
# (:material/x:), an arrow or sign (->, --, >=).
_TRANSFORMED = re.compile(r"://|www\.|@|:(?:\+1|-1|[\w-]*[^\W\d][\w-]*|100|1234):|:material/"
                          r"|^(?:<->|->|<-|--|>=|<=|~=)$", re.IGNORECASE)


def plain(text: str) -> str:
    """Text (a run's name, label or id, as typed) as Markdown that Streamlit shows exactly as written: never bold,
    never a link. Markdown's signs are escaped; a word it would change whatever its escapes is code."""
    words = "".join(_code(word) if _TRANSFORMED.search(word) else _INLINE.sub(r"\\\1", word)
                    for word in re.split(r"(\s+)", text))
    return _LINE_START.sub(r"\1\\\2", words, count=1)


def _code(word: str) -> str:
    """A word as Markdown code spans: fenced by more backticks than it holds, and its ':material/' split in two
    around the '/' (Streamlit replaces that text even in code)."""
    spans = []
    for part in re.split(r"(?<=:material)/", word):
        fence = "`" * (max(map(len, re.findall("`+", part)), default=0) + 1)
        pad = " " if part.startswith("`") or part.endswith("`") else ""
        spans.append(f"{fence}{pad}{part}{pad}{fence}" if part else "")
    return "\\/".join(spans)

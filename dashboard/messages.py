"""A refusal in the words of the page: every page turns a ConfigError (or a core message naming fields) into
what the user reads under a control, here and only here."""

from __future__ import annotations

import re
from collections.abc import Mapping

from gaccum_core.config import ConfigError

OWN_LABELS = {"model": "Your model", "dataset": "Your data set"}  # the 'your own…' text boxes' labels
OWN_FORMS = {"model": "timm:NAME, MODULE:FUNCTION, FILE.py:FUNCTION or hf:path/to/model_dir",
             "dataset": "MODULE:FUNCTION or FILE.py:FUNCTION"}
_CLI_OR_UI = re.compile(r"pass --[a-z-]+ \(CLI\) or tick '([a-z_]+)' \(UI\)")
_SET_FIELD = re.compile(r"\bset ([a-z_]+) to\b")
# What to do, after a ConfigError's own words, for settings that only make sense together:
# (field, words of the error's allowed text, hint).
_HINTS = (
    ("dataset", "text data set", ". Pick pydoc (bundled) or text (your own file) under Dataset, "
                                 "or an image model under Model"),
    ("model", "language model", ". Pick gpt under Model (or your own… and type hf:DIR), "
                                "or an image data set under Dataset"),
    ("max_seq_len", "positions", ". Shorten the sequences, or pick a larger GPT size"),
    ("sharding", "one process", ". Set Processes N to 2 or more, or pick ddp"),
)


def explain(exc: ConfigError, labels: Mapping[str, str]) -> str:
    """A ConfigError in the page's words: the control's label, the value, what is allowed (and what to do
    for settings that only make sense together). A 'your own…' box left empty says what to type in it; any
    other empty control, what to choose. A field the page has no control for keeps the core's words."""
    label = labels.get(exc.field)
    if label is None:
        return str(exc)
    if exc.field in OWN_LABELS and exc.value == "":
        return f"{OWN_LABELS[exc.field]} is empty: type {OWN_FORMS[exc.field]}"
    if exc.value in (None, ""):
        return f"{label} is empty: choose {exc.allowed}"
    hint = next((h for field, words, h in _HINTS if field == exc.field and words in exc.allowed), "")
    return f"{label} = {exc.value!r} is not allowed: {exc.allowed}{hint}"


def in_page_words(message: str, labels: Mapping[str, str]) -> str:
    """A message from gaccum_core with its field names (and CLI advice) in the page's labels."""
    message = _CLI_OR_UI.sub(lambda m: f"tick '{labels.get(m[1], m[1])}'", message)
    return _SET_FIELD.sub(lambda m: f"set '{labels[m[1]]}' to" if m[1] in labels else m[0], message)

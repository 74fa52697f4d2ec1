"""A foreign error inside a one-line message: its type and its message's first line, cut to a limit."""

from gaccum_core.words import first_line


def test_first_line_keeps_the_type_and_the_first_line_only():
    error = OSError("  disk full\n  Traceback (most recent call last):\n  more  ")
    assert first_line(error) == "OSError: disk full"


def test_first_line_of_an_error_without_a_message_is_its_type():
    assert first_line(KeyError()) == "KeyError"
    assert first_line(ValueError("\n\n")) == "ValueError"


def test_first_line_cuts_a_long_message_at_the_limit():
    assert first_line(RuntimeError("x" * 50), limit=10) == "RuntimeError: " + "x" * 10

"""The command line, `python -m gaccum_core run|resume|plan|doctor|worker`: one module per command."""

from gaccum_core.cli.main import build_parser, main

__all__ = ["build_parser", "main"]

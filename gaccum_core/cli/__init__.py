"""The command line, `python -m gaccum_core run|sweep|plan|check|worker|resume|doctor`: one module per
command (run, sweep, plan, check, worker, resume, doctor), what they share in args, the progress bars in
progress and sweep_progress,
and main, which builds the parser from them.
"""

# Imported now, not through lazy_exports: importing the module gaccum_core.cli.main sets the package's
# attribute `main` to that module, so a lazy `from gaccum_core.cli import main` could get the module.
from gaccum_core.cli.main import build_parser, command_help, main

__all__ = ["build_parser", "command_help", "main"]

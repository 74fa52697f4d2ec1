"""Where runs are kept, one rule for the command line, the dashboard's server and the token cache beside the
runs: --runs-dir, else GACCUM_RUNS_DIR, else ./runs. A run started from either is seen by the other."""

from __future__ import annotations

import os

RUNS_DIR_ENV = "GACCUM_RUNS_DIR"
DEFAULT_RUNS_DIR = "runs"
RUNS_DIR_HELP = (f"directory that holds one folder per run (default: ${RUNS_DIR_ENV} if set, else "
                 f"./{DEFAULT_RUNS_DIR}; the dashboard reads the same)")


def runs_dir(flag: str | None = None) -> str:
    """The runs directory: `flag` (--runs-dir) when given, else GACCUM_RUNS_DIR when set and not empty, else 'runs'."""
    return flag or os.environ.get(RUNS_DIR_ENV) or DEFAULT_RUNS_DIR

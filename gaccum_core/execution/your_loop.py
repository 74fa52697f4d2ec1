"""verify on your loop's file, whole: its functions loaded, setup() called, the splits read against its batch, and
check_loop's report. The Equivalence page runs it in a worker process of its own (call_aside: the server never
imports your file), where it relays each window run done as progress; the command line runs it in its own process."""

from __future__ import annotations

from gaccum_core.verify.check import Progress, check_loop
from gaccum_core.verify.loop import VerifyError, batch_size, call_setup, load_loop
from gaccum_core.verify.report import VerifyReport
from gaccum_core.verify.splits import parse_splits

OBJECTIVE = "objective"  # the optional objective's name when none is asked for


def check_file(path: str, setup: str = "setup", window: str = "window", objective: str | None = None,
               splits: str | None = None, fixed_k: int | None = None, device: str | None = None,
               on_split: Progress | None = None) -> VerifyReport:
    """check_loop on FILE.py's window and setup() (objective: a name it must define; None: OBJECTIVE where it is
    defined), on splits written as --splits writes them (None: the default set); VerifyError in one line."""
    loop = load_loop(path, setup, window, objective or OBJECTIVE)
    if objective and loop.objective is None:
        raise VerifyError(f"objective={objective!r} is not allowed: a function {objective} in {path}: it defines none")
    model, batch = call_setup(loop)
    chosen = None if splits is None else parse_splits(splits, batch_size(batch))
    return check_loop(loop.window, model, batch, chosen, fixed_k, loop.objective, device, on_split)

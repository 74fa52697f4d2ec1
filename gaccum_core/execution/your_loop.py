"""verify on your loop's file, whole: its functions loaded, setup() called, the splits read against its batch, and
check_loop's report. The Equivalence page runs it in a worker process of its own (call_aside: the server never
imports your file), where it relays each window run done as progress, and says it again every BEAT_S meanwhile: the
page's run notices that it ended (Cancel, a rerun, a closed tab) at its next call, which kills the worker, within
BEAT_S however long one of your windows takes."""

from __future__ import annotations

import threading
from typing import Callable

from gaccum_core.verify.check import check_file
from gaccum_core.verify.report import VerifyReport

BEAT_S = 0.5  # seconds between two progress calls of a check aside, at most


def check_file_aside(path: str, setup: str, window: str, objective: str | None, splits: str | None,
                     fixed_k: int | None, device: str | None, relay: Callable[..., None]) -> VerifyReport:
    """check_file as call_aside runs it: relay(done, planned) after each window run, and the last of these again
    every BEAT_S (relay() before the first) until it returns."""
    lock, last, finished = threading.Lock(), [], threading.Event()

    def tell(*progress: int) -> None:
        with lock:  # one frame at a time on the pipe
            last[:] = progress
            relay(*progress)

    def beat() -> None:
        while not finished.wait(BEAT_S):
            tell(*last)

    beating = threading.Thread(target=beat, name="gaccum-verify-beat", daemon=True)
    beating.start()
    try:
        return check_file(path, setup, window, objective, splits, fixed_k, device, on_split=tell)
    finally:
        finished.set()
        beating.join()

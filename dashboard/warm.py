"""The server's warm-up, done while the first page is read: torch, the runner with its warm spare worker,
the Train page's modules and its checks of the default settings.

The home page draws without any of it (it imports no torch); it starts the warm-up once its own
drawing is sent, so that the Train page opened next finds everything imported and checked. Nothing
here draws: the pages read `device_text()` and `runner_if_ready()`.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gaccum_core.runs.runner import Runner

_lock = threading.Lock()
_started = False
_done = threading.Event()
_result: dict[str, object] = {}


def runs_dir() -> str:
    """Where runs are kept: GACCUM_RUNS_DIR, default ./runs."""
    return os.environ.get("GACCUM_RUNS_DIR", "runs")


def executor() -> str:
    """Where runs train: a worker process unless GACCUM_EXECUTOR=thread."""
    return os.environ.get("GACCUM_EXECUTOR", "process")


def start() -> None:
    """Start the warm-up in a background thread, once per server process."""
    global _started
    with _lock:
        if _started:
            return
        _started = True
    threading.Thread(target=_warm_up, name="gaccum-warm-up", daemon=True).start()


def ready() -> bool:
    """Whether the warm-up has ended (successfully or not)."""
    return _done.is_set()


def wait(timeout_s: float | None = None) -> bool:
    """Wait for the warm-up to end; whether it has."""
    return _done.wait(timeout_s)


def device_text() -> str | None:
    """'CPU — runs train on the CPU' or the GPU's name and free memory; None until the warm-up found it."""
    return _result.get("device")  # type: ignore[return-value]


def runner_if_ready() -> Runner | None:
    """The server's runner once the warm-up has created it (with its spare worker), else None."""
    if not _done.is_set():
        return None
    from dashboard.ui import get_runner  # imported by the warm-up: no cost now

    return get_runner()


def describe_device() -> str:
    """The device runs train on by default, in one line (imports torch)."""
    from gaccum_core.train.device import device_name, memory_info, resolve_device

    device = resolve_device("auto")
    if device.type != "cuda":
        return "CPU — runs train on the CPU"
    free, total = memory_info(device)
    return f"Device: {device_name(device)} · {free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB"


def _warm_up() -> None:
    try:
        _result["device"] = describe_device()
        _check_defaults()  # what the Train page's first draw waits for, before the spare worker takes a core
        from dashboard.ui import get_runner

        get_runner()
    except Exception as exc:  # noqa: BLE001 - a page that needs what failed shows its own error
        _result.setdefault("device", f"Device: not known ({type(exc).__name__}: {exc})")
    finally:
        _done.set()


def _check_defaults() -> None:
    """Import the Train page's controls (the core modules behind them: torch, the engine, the data) and
    check its default settings once (the core caches the data). Modules that declare Streamlit
    components are left to the page's own run: declared from this thread, their files were not served."""
    from dashboard.controls import DEFAULTS
    from gaccum_core.data import describe_dataset
    from gaccum_core.lab.loopcode import render_loop
    from gaccum_core.train.checks import preflight

    describe_dataset(DEFAULTS)
    preflight(DEFAULTS)
    render_loop(DEFAULTS)

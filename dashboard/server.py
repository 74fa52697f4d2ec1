"""The server's singletons, one per server process for every browser session and tab: where runs are kept
(GACCUM_RUNS_DIR), where they train (GACCUM_EXECUTOR), the runner, the chart cache, and the warm-up.

The warm-up runs while the first page is read: it starts the warm spare worker (which imports torch in a
process of its own meanwhile), imports torch, checks the Train page's default settings and creates the
runner, which takes that spare, so that the Train page opened next finds everything ready. The home page
draws without any of it (it imports no torch): this module imports the core's heavy modules only inside
the functions that need them, and the home page reads `device_lines()` and `runner_if_ready()`, which
never wait. The device line is looked at again (nvidia-smi, in a thread: no CUDA context in the server) on
each page run that finds it older than DEVICE_FRESH_S, and shown once the look is back.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import streamlit as st

from gaccum_core import runsdir

if TYPE_CHECKING:
    from gaccum_core.execution.runner import Runner
    from gaccum_core.execution.supervisor import Spare
    from gaccum_core.train.gpus import DeviceFacts
    from gaccum_core.views.chart_cache import ChartCache

# Training runs in a thread of this server. Each torch op releases the GIL, and taking it back waits
# up to the switch interval whenever a page is being drawn: at Python's 5 ms, 150 ms of drawing per
# second made a small model train 3x slower (measured); at 0.5 ms, 1.4x.
TRAINING_SWITCH_INTERVAL_S = 0.0005
DEVICE_FRESH_S = 2.0  # a device line this old is looked at again (nvidia-smi: tens of ms, up to seconds)

_lock = threading.Lock()
_checked = False
_started = False
_done = threading.Event()
_result: dict[str, object] = {}
_first_spare: list[Spare] = []  # the spare the warm-up started before it imported torch, till the runner takes it
_devices: dict[str, object] = {}  # "facts": the last look (DeviceFacts), "at": its monotonic time, "looking": a thread


def runs_dir() -> str:
    """Where runs are kept: GACCUM_RUNS_DIR, else ./runs; the command line's rule (gaccum_core.runsdir)."""
    return runsdir.runs_dir()


def executor() -> str:
    """Where runs train: a worker process unless GACCUM_EXECUTOR=thread (unset or empty: the first of EXECUTORS, as
    the server's check reads it)."""
    from gaccum_core.execution.server_env import EXECUTOR_ENV, EXECUTORS

    return os.environ.get(EXECUTOR_ENV) or EXECUTORS[0]


@st.cache_resource
def _runner(runs_dir: str, executor: str, spare_idle: str | None) -> Runner:
    from gaccum_core.execution.runner import Runner  # torch: not before a page needs the runner
    from gaccum_core.execution.spares import idle_limit

    sys.setswitchinterval(TRAINING_SWITCH_INTERVAL_S)
    first = _take_first_spare() if executor == "process" else None
    # Your own code: only in workers, only GACCUM_USER_CODE's.
    return Runner(runs_dir, executor=executor, confined=True, spare_idle_s=idle_limit(spare_idle), first_spare=first)


def get_runner() -> Runner:
    """One runner per server process and runs directory: every browser session and tab sees the same runs.
    Runs train in worker processes unless GACCUM_EXECUTOR=thread (then in this server's threads); a warm
    torchrun job nobody asked for in GACCUM_SPARE_IDLE_S seconds (default 300) is ended."""
    return _runner(runs_dir(), executor(), os.environ.get("GACCUM_SPARE_IDLE_S"))


@st.cache_resource
def chart_cache() -> ChartCache:
    """One chart cache per server process: every session and tab shares the charts it builds."""
    from gaccum_core.views.chart_cache import ChartCache

    return ChartCache()


def check_settings() -> None:
    """Once per server process, on its first page run (app.py) and so before the warm-up starts a worker: a
    GACCUM_* variable set to a value the server cannot use ends it, one line on stderr per bad value, exit 2.
    Never drawn as a page's traceback: nothing has started that could use it."""
    global _checked
    from gaccum_core.execution.server_env import env_problems

    with _lock:
        if _checked:
            return
        _checked = True
    problems = env_problems()
    if problems:
        sys.stderr.write("".join(f"gaccum: error: {line}\n" for line in problems))
        sys.stderr.flush()
        os._exit(2)  # the script thread of a Streamlit server: sys.exit would end this page's run only


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


def device_lines(runs: Mapping[str, str]) -> list[str] | None:
    """The device line, one line per GPU (name, free memory, the run in runs: device -> label using it) or the
    CPU's; None until the warm-up has looked. From the last look: refresh_devices() takes a new one."""
    facts: DeviceFacts | None = _devices.get("facts")  # type: ignore[assignment]
    if facts is None:  # before the warm-up's look, or why it found no device
        return [_result["device"]] if "device" in _result else None  # type: ignore[list-item]
    from gaccum_core.train.gpus import describe_devices

    return describe_devices(facts, runs)


def refresh_devices(wait_s: float = 0.0) -> None:
    """Look at the devices again in a thread when the last look is older than DEVICE_FRESH_S (after the warm-up,
    which takes the first: torch says how many GPUs CUDA sees), waiting up to wait_s for it to come back."""
    with _lock:
        stale = time.monotonic() - _devices.get("at", 0.0) > DEVICE_FRESH_S  # type: ignore[operator]
        if not _done.is_set() or "facts" not in _devices or not stale or devices_looking():
            return
        _devices["looking"] = thread = threading.Thread(target=_look_at_devices, name="gaccum-devices", daemon=True)
        thread.start()
    thread.join(wait_s)


def devices_looking() -> bool:
    """Whether a look at the devices is under way (its line comes when it ends)."""
    thread = _devices.get("looking")
    return isinstance(thread, threading.Thread) and thread.is_alive()


def _look_at_devices() -> None:
    """One look (nvidia-smi, torch's CUDA count: neither creates a CUDA context), kept with its time."""
    from gaccum_core.train.device import gpu_count
    from gaccum_core.train.gpus import look

    facts = look(gpu_count())
    _devices.update(facts=facts, at=time.monotonic())


def runner_if_ready() -> Runner | None:
    """The server's runner once the warm-up has created it (with its spare worker), else None."""
    return get_runner() if _done.is_set() else None


def _warm_up() -> None:
    try:
        _start_spare()
        _look_at_devices()
        _check_defaults()  # what the Train page's first draw waits for
        get_runner()
    except Exception as exc:  # noqa: BLE001 - a page that needs what failed shows its own error
        _result.setdefault("device", f"Device: not known ({type(exc).__name__}: {exc})")
    finally:
        _drop_unused_spare()  # a runner made before the warm-up (a page opened first) has its own
        _done.set()


def _start_spare() -> None:
    """Start the runner's first spare worker now, without torch (supervisor imports none): it imports torch
    beside this thread instead of after it, and Start, enabled once it is warm, is enabled seconds sooner."""
    if executor() == "process":
        from gaccum_core.execution.supervisor import spawn_spare

        _first_spare.append(spawn_spare())


def _take_first_spare() -> Spare | None:
    """The spare the warm-up started, for the runner being made; None when there is none (left)."""
    with _lock:
        return _first_spare.pop() if _first_spare else None


def _drop_unused_spare() -> None:
    """Kill the spare the warm-up started when no runner took it."""
    from gaccum_core.execution.supervisor import kill_tree

    if (spare := _take_first_spare()) is not None:
        kill_tree(spare.proc)


def _check_defaults() -> None:
    """Import the core modules behind the Train page (torch, the engine, the data) and check its default
    settings once (the core caches the data). The page's own modules, which declare Streamlit components,
    are left to the page's run: declared from this thread, their files were not served."""
    from gaccum_core.config import DEFAULT_RUN
    from gaccum_core.data.load import describe_dataset
    from gaccum_core.lab.loopcode import render_loop
    from gaccum_core.train.checks import preflight

    describe_dataset(DEFAULT_RUN)
    preflight(DEFAULT_RUN)
    render_loop(DEFAULT_RUN)

"""A page's computation on your own code (the Plan and Equivalence pages), done in a worker process of its own.

The dashboard's server never imports your code (usercode). The planner and the equivalence check compute in
the page's own thread on the CPU; when their settings name your code, or their device is a GPU (goes_aside),
`call_aside` runs the same function in a fresh `python -m gaccum_core.execution.aside` process instead, and on a GPU
that process measures only once the device queue gives it the GPU (no run trains there meanwhile, and the server
holds no CUDA context for it). That process imports your code (names looked up in
GACCUM_USER_CODE's folder, as a run's worker does), tells each progress call back over a pipe of its own (your
code may print what it likes), and sends the result or the error. It ends with the call; it is killed when the
page's run ends first (a rerun, a closed tab) or the server exits, so none outlives what asked for it.

What crosses the pipe is pickled: the page unpickles what your code's process sends. That process runs only
code from the folder the server's owner allowed (the same trust as a run's worker).
"""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import tempfile
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, BinaryIO, Callable

from gaccum_core.config import RunConfig
from gaccum_core.words import first_line
from gaccum_core.execution.device_queue import devices_of
from gaccum_core.execution.supervisor import child_env, dies_with_this_thread
from gaccum_core.usercode import runs_here, user_code_fields

if TYPE_CHECKING:
    import torch

Turn = Callable[[tuple[str, ...]], AbstractContextManager]  # holds these devices in the device queue (Runner.turn)

_LENGTH = 8  # bytes of a frame's length prefix


def _send(out: BinaryIO, kind: str, value: Any) -> None:
    data = pickle.dumps((kind, value))
    out.write(len(data).to_bytes(_LENGTH, "big") + data)
    out.flush()


def _receive(source: BinaryIO) -> tuple[str, Any] | None:
    """The next (kind, value) frame, None at the end of the pipe (the process exited)."""
    head = source.read(_LENGTH)
    if len(head) < _LENGTH:
        return None
    return pickle.loads(source.read(int.from_bytes(head, "big")))


def _portable(exc: BaseException) -> BaseException:
    """The error as it can cross to the page: itself when it pickles back, else a RuntimeError of its first line."""
    try:
        return pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - an exception type of your code's that does not pickle
        return RuntimeError(first_line(exc))


def call_aside(function: Callable, *args: Any, progress: Callable | None = None) -> Any:
    """function(*args, relay) in a worker process, where relay(*a) calls progress(*a) here; its result, or what it
    raised raised here. RuntimeError naming the last line it wrote when the process dies without an answer."""
    read_end, write_end = os.pipe()
    with tempfile.TemporaryFile() as errors:
        try:
            child = subprocess.Popen([sys.executable, "-m", "gaccum_core.execution.aside", str(write_end)],
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=errors,
                                     pass_fds=(write_end,), env=child_env(), preexec_fn=dies_with_this_thread())
        finally:
            os.close(write_end)
        with os.fdopen(read_end, "rb") as answers:
            try:
                child.stdin.write(pickle.dumps((function.__module__, function.__qualname__, args)))
                child.stdin.close()
                while (frame := _receive(answers)) is not None:
                    kind, value = frame
                    if kind == "progress" and progress is not None:
                        progress(*value)
                    elif kind == "error":
                        raise value
                    elif kind == "result":
                        return value
            finally:
                if child.poll() is None:
                    child.kill()
                child.wait()
        errors.seek(0)
        lines = errors.read().decode(errors="replace").strip().splitlines()
    raise RuntimeError(f"the worker process computing it exited ({child.returncode}) without an answer"
                       + (f": {lines[-1][:300]}" if lines else ""))


def goes_aside(config: RunConfig, device: torch.device | None) -> bool:
    """Whether a page's computation for config on device (None: the CPU) runs in a worker process: on a GPU always,
    and where config names your own code that this thread may not run (a page of the dashboard)."""
    return _on_gpu(device) or bool(user_code_fields(config)) and not runs_here()


def call_for(config: RunConfig, function: Callable, *args: Any, progress: Callable | None = None,
             device: torch.device | None = None, turn: Turn | None = None) -> Any:
    """function(*args, progress) in this thread, or aside in a worker process (call_aside) where goes_aside says so;
    on a GPU inside turn((device,)), which waits until the runs ahead on it have ended and holds it meanwhile."""
    if not goes_aside(config, device):
        return function(*args, progress)
    with turn(devices_of(config, device)) if _on_gpu(device) and turn is not None else nullcontext():
        return call_aside(function, *args, progress=progress)


def _on_gpu(device: torch.device | None) -> bool:
    return device is not None and device.type == "cuda"


def _main(write_end: int) -> None:
    """The worker's side: read (module, name, args) from stdin, call it, send its progress and its answer."""
    with os.fdopen(write_end, "wb") as out:
        module, name, args = pickle.load(sys.stdin.buffer)
        function = getattr(importlib.import_module(module), name)
        try:
            result = function(*args, lambda *a: _send(out, "progress", a))
        except BaseException as exc:  # noqa: BLE001 - sys.exit in your code included: the page says what it was
            _send(out, "error", _portable(exc))
        else:
            _send(out, "result", result)


if __name__ == "__main__":
    _main(int(sys.argv[1]))

"""Fixtures shared by the tests."""

import gc
import importlib
import os
import subprocess
import sys
import threading
from typing import Iterator

# The suite writes the bytecode of what it imports, in this process and in every process it starts (they inherit the
# environment): CI installs with `pip install --no-compile` (35 s less), and where PYTHONDONTWRITEBYTECODE is set (as
# on this project's machines) each of the suite's hundreds of processes would otherwise compile torch's modules again.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

import pytest  # noqa: E402
import torch  # noqa: E402

# A GPU image often has torch, pytest, pandas, transformers and timm but not the dashboard (streamlit, plotly)
# nor pytest-xdist, and nothing can be installed there: `python3 -m pytest -m cuda tests/` must still run the
# cuda tests (tests/cuda/, which import neither). Without the dashboard only they are collected; without
# pytest-xdist the -n and --dist of the project's addopts are accepted and mean nothing (one process).
try:
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

    DASHBOARD = importlib.import_module("plotly") is not None  # the charts' library, with streamlit
except ImportError:
    DASHBOARD = False
    collect_ignore_glob = [entry.name for entry in os.scandir(os.path.dirname(__file__))
                           if entry.name not in ("cuda", "conftest.py", "__pycache__")]


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Without pytest-xdist: the project's addopts (-n 3 --dist loadfile) accepted, and ignored."""
    if not pluginmanager.has_plugin("xdist"):
        group = parser.getgroup("xdist", "pytest-xdist is not installed here: its options are ignored")
        # _addoption, as pytest-xdist registers -n itself: a lowercase short option is reserved to plugins.
        group._addoption("-n", dest="numprocesses", default=None, help="ignored without pytest-xdist")
        group.addoption("--dist", dest="dist", default=None, help="ignored without pytest-xdist")


# Every process the suite starts (dashboard servers, workers, command lines; torchrun sets its ranks' own)
# trains on one torch thread, as the test processes do: three test files share two cores, and a second
# thread per process only contends for them.
os.environ.setdefault("OMP_NUM_THREADS", "1")


_MAIN = sys.modules["__main__"]


@pytest.fixture(autouse=True)
def main_module_put_back():
    """An AppTest leaves the page it ran as __main__ (seen with streamlit 1.67), and multiprocessing's spawn
    re-runs __main__ in its children: a later test of this xdist worker that spawns processes (torch's
    mp.spawn) would start the page in each (exit 1 in CI). Every test ends with pytest's own put back."""
    yield
    sys.modules["__main__"] = _MAIN


@pytest.fixture(autouse=True)
def thread_executor_for_pages(monkeypatch):
    """AppTest pages run their runner in the test process, in threads, so tests can arm faults and gates
    there; tests of the worker-process executor (and the browser tests' servers) ask for it explicitly."""
    monkeypatch.setenv("GACCUM_EXECUTOR", "thread")


@pytest.fixture(autouse=True)
def token_cache_dir(tmp_path_factory, monkeypatch):
    """GACCUM_CACHE_DIR: a token cache folder of this test's own (and of the processes it starts), never one
    beside the checkout's runs directory."""
    folder = tmp_path_factory.mktemp("token-cache")
    monkeypatch.setenv("GACCUM_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB tmpfs of its own (mounting needs root, as on the CI machines), for a full or read-only disk."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a 4 MB tmpfs here ({done.stderr.strip()}): this test needs root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.fixture
def runs_dir(tmp_path, monkeypatch):
    """Each test gets its own runs directory (and so its own per-process runner)."""
    monkeypatch.setenv("GACCUM_RUNS_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def downloads(monkeypatch):
    """Captures what download buttons would send, by file name."""
    files = {}
    real = MemoryMediaFileStorage.load_and_get_id

    def capture(self, path_or_data, mimetype, kind, filename=None):
        if filename:
            files[filename] = path_or_data
        return real(self, path_or_data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", capture)
    return files


@pytest.fixture(autouse=True, scope="module")
def _heap_thawed_after_the_module():
    """Hands the objects frozen by frozen_heap back to the collector when a test module ends."""
    yield
    gc.unfreeze()


@pytest.fixture(autouse=True)
def frozen_heap(_heap_thawed_after_the_module):
    """Every gc.collect() the product makes (clear_cache at each run's end and per plan candidate, and per
    step or micro-batch when asked) traverses every object the collector tracks: in a test process holding
    torch, pandas and streamlit ~0.3 s each, more as a worker's heap grows over the files it runs (measured:
    29 s of the 74 s of CPU test_bad_input, test_runner and test_probe took in one process; 3 s with this).
    So the objects alive when a test starts (modules, caches, the module's fixtures) are moved out of its
    way (gc.freeze) after one collection; what the test makes is collected as before."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """The tests train tiny models: on a shared 2-core machine a second torch thread only contends
    (measured ~10x slower under load), so the suite runs on one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class MicroBatchGate:
    """Holds a run's training thread at the start of chosen micro-batches, through the engine's fault hook.

    hold(step, micro) arms a zero-second 'slow' fault there; when the engine reaches it, the thread
    waits (before that micro-batch's forward pass) until release(). While any fault is armed the hook
    is asked before every micro-batch, so `started` lists each (step, micro) the engine began.
    Tests use it to act at a known point of a run instead of sleeping and hoping.
    """

    HANG_GUARD_S = 300.0  # only so a broken hook cannot block a test or a thread forever; never reached when passing

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from gaccum_core import faults

        self.started: list[tuple[int, int]] = []
        self._held: list[faults.Fault] = []
        self._reached = threading.Event()
        self._released = threading.Event()
        real_due = faults.due
        faults.arm(faults.Fault("slow", step=10**9, seconds=0.0))  # never fires: keeps the hook asked

        def due(step: int, micro: int) -> faults.Fault | None:
            self.started.append((step, micro))
            fault = real_due(step, micro)
            if any(fault is held for held in self._held):
                self._reached.set()
                self._released.wait(self.HANG_GUARD_S)
            return fault

        monkeypatch.setattr(faults, "due", due)

    def hold(self, step: int, micro: int = 0) -> None:
        """Arm a hold at this micro-batch of the next run to reach it."""
        from gaccum_core import faults

        fault = faults.Fault("slow", step=step, micro=micro, seconds=0.0)
        self._reached.clear()
        self._released.clear()
        self._held.append(fault)
        faults.arm(fault)

    def wait_until_held(self) -> None:
        """Block until the training thread is held; fails (not hangs) if it never gets there."""
        assert self._reached.wait(self.HANG_GUARD_S), "the run never reached the held micro-batch"

    def release(self) -> None:
        """Let the held thread go on."""
        self._released.set()


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[MicroBatchGate]:
    """A MicroBatchGate; every fault is disarmed and any held thread released afterwards."""
    from gaccum_core import faults

    gate = MicroBatchGate(monkeypatch)
    yield gate
    gate.release()
    faults.disarm()

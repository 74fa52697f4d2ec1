"""Fixtures shared by the page tests."""

import pytest
import torch
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage


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


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """The tests train tiny models: on a shared 2-core machine a second torch thread only contends
    (measured ~10x slower under load), so the suite runs on one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

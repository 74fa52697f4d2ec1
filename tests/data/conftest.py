"""The data tests' token caches go to a temporary folder, never beside the checkout's runs directory."""

import pytest


@pytest.fixture(autouse=True)
def token_cache_dir(tmp_path_factory, monkeypatch):
    """GACCUM_CACHE_DIR: a folder of this test's own."""
    folder = tmp_path_factory.mktemp("token-cache")
    monkeypatch.setenv("GACCUM_CACHE_DIR", str(folder))
    return folder

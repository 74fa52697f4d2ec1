"""Fixtures the run-store tests share."""

from __future__ import annotations

import pytest

import gaccum_core.runs.index as index


@pytest.fixture
def restarted():
    """Forget what this process has seen of every runs directory, as a server just started has not."""
    index._SEEN.clear()
    yield lambda: index._SEEN.clear()
    index._SEEN.clear()

"""The server's sweeps going: one SweepJob per sweep id for every session and tab, on the server's runner
(so a sweep's runs queue with the Train page's on the same device)."""

from __future__ import annotations

import threading

import streamlit as st

from dashboard.server import get_runner
from gaccum_core.sweeps.job import SweepJob
from gaccum_core.train.device import gpu_count
from gaccum_core.sweeps.spec import SweepSpec


class SweepJobs:
    """Sweep jobs by id; a sweep already going is joined, not started twice."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, SweepJob] = {}

    def start(self, spec: SweepSpec) -> SweepJob:
        """The sweep's job: the one going, or a new one started (skipping the runs done before)."""
        with self._lock:
            job = self._jobs.get(spec.sweep_id)
            if job is None or job.progress().over:
                job = SweepJob(get_runner(), spec, gpu_count()).start()
                self._jobs[spec.sweep_id] = job
            return job

    def get(self, sweep_id: str) -> SweepJob | None:
        """The job of this sweep started by this server, if any."""
        with self._lock:
            return self._jobs.get(sweep_id)

    def going(self) -> list[SweepJob]:
        """The jobs not yet over."""
        with self._lock:
            return [job for job in self._jobs.values() if not job.progress().over]


@st.cache_resource
def _jobs(runs_dir: str) -> SweepJobs:
    return SweepJobs()


def sweep_jobs() -> SweepJobs:
    """The server's sweep jobs for its runs directory (GACCUM_RUNS_DIR)."""
    return _jobs(str(get_runner().store.root))

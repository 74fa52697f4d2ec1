"""A sweep on a machine with several GPUs trains one run per GPU at a time (no GPU here: a runner double
that records where each run was sent and holds each until another lane's run is in flight too)."""

import threading
from types import SimpleNamespace

from gaccum_core.runs.store import RunStore
from gaccum_core.states import RunState
from gaccum_core.sweeps.job import SweepJob
from gaccum_core.sweeps.spec import SweepSpec

SPEC = SweepSpec(grid=(("micro_batch_size", (8, 16, 32, 64)),), common=(("model", "mlp"), ("device", "auto")),
                 effective_batch=64)


class TwoAtOnce:
    """Submits nothing to a device: records the device of each run, and lets a run end only once a run of
    the other GPU is training beside it (a barrier of two: serial lanes would never get past it)."""

    def __init__(self, root):
        self.store = RunStore(root)
        self.devices, self.together = [], threading.Barrier(2, timeout=60)
        self._lock = threading.Lock()

    def submit(self, config, name=None, plan=None, tags=()):
        with self._lock:
            self.devices.append(config.device)
            return f"run-{len(self.devices)}"

    def wait(self, run_id, timeout=None):
        self.together.wait()
        return SimpleNamespace(state=RunState.FINISHED)

    def snapshot(self, run_id):
        return SimpleNamespace(run_id=run_id, state=RunState.RUNNING, eta_s=None, elapsed_s=0.0)

    def stop(self, run_id):
        pass


def test_runs_go_one_per_gpu_two_at_a_time(tmp_path):
    runner = TwoAtOnce(tmp_path)
    job = SweepJob(runner, SPEC, gpus=2).start()
    assert job.wait(120)
    assert job.progress().state == "finished" and job.progress().done == 4
    assert sorted(runner.devices) == ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]
    assert not runner.together.broken  # every run ended beside a run of the other GPU


def test_a_run_the_runs_directory_cannot_take_counts_as_failed_and_the_sweep_ends(tmp_path):
    class Refusing(TwoAtOnce):
        def submit(self, config, name=None, plan=None, tags=()):
            raise OSError(28, "No space left on device")

    job = SweepJob(Refusing(tmp_path), SPEC, gpus=0).start()
    assert job.wait(120)
    progress = job.progress()
    assert (progress.state, progress.done, progress.failed) == ("finished", 0, 4)
    assert "No space left on device" in progress.message

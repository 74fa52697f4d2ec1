"""A sweep's lanes agree with the device queue: on two GPUs its one-process runs train two at a time, one per GPU,
never two on one GPU (no GPU here: the runner's runs hold the GPUs their settings name, tests/device_runs.py)."""

import time

from gaccum_core.states import RunState
from gaccum_core.sweeps.job import SweepJob
from gaccum_core.sweeps.spec import SweepSpec
from tests.device_runs import stub_gpu_runner

SPEC = SweepSpec(grid=(("micro_batch_size", (8, 16, 32, 64)),), common=(("model", "mlp"), ("device", "auto")),
                 effective_batch=64)


def test_a_sweeps_runs_go_one_per_gpu_side_by_side_in_the_queue(tmp_path, monkeypatch):
    with stub_gpu_runner(tmp_path, monkeypatch) as (runner, end):
        job = SweepJob(runner, SPEC, gpus=2).start()
        pairs, deadline = [], time.monotonic() + 60
        while not job.wait(0.02) and time.monotonic() < deadline:
            running = [s for s in runner.snapshots() if s.state == RunState.RUNNING]
            held = [device for s in running for device in s.devices]
            assert len(held) == len(set(held)), held  # never two runs on one GPU
            if len(running) == 2:  # both lanes' runs train at once: let them end, and look again once they have
                pairs.append(sorted(held))
                for snapshot in running:
                    end(snapshot.run_id)
                while any(runner.snapshot(s.run_id).state == RunState.RUNNING for s in running):
                    time.sleep(0.01)
        assert job.progress().state == "finished" and job.progress().done == 4
        assert pairs == [["cuda:0", "cuda:1"]] * 2

"""docs/distributed.md's two-machine commands, run as two 'machines' on this one: node 0 writes the run, node 1
joins it, and the job trains exactly what one process with micro-batch N·b trains."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from chromium import free_port

from gaccum_core.config import RunConfig
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import NullSink

pytestmark = pytest.mark.multiprocess

ROOT = Path(__file__).resolve().parents[2]
FLAGS = ["--model", "mlp", "--micro-batch-size", "16", "--accum-steps", "2", "--max-steps", "4", "--device", "cpu"]


def _node(rank: int, endpoint: str, runs: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "gaccum_core", "run", "--runs-dir", str(runs), "--nnodes", "2",
               "--node-rank", str(rank), "--rdzv-endpoint", endpoint, "--nproc", "1", *FLAGS]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_nodes_train_one_run_written_by_node_0_equal_to_one_process(tmp_path):
    """Node 0 and node 1 (one process each) train one run of world size 2; node 1 writes nothing."""
    endpoint = f"127.0.0.1:{free_port()}"
    node1 = _node(1, endpoint, tmp_path / "node1")
    node0 = _node(0, endpoint, tmp_path / "node0")
    out0, err0 = node0.communicate(timeout=300)
    _, err1 = node1.communicate(timeout=120)
    assert node0.returncode == 0 and node1.returncode == 0, err0[-800:] + err1[-800:]
    assert not (tmp_path / "node1").exists()
    run_dir = Path(out0.strip().splitlines()[-1])
    metrics = pd.read_csv(run_dir / "metrics.csv")
    assert metrics["world_size"].tolist() == [2] * 4 and metrics["samples"].tolist() == [64] * 4
    reference = Engine(RunConfig(model="mlp", micro_batch_size=32, accum_steps=2, max_steps=4, device="cpu"))
    reference.run(NullSink())
    saved = torch.load(run_dir / "model.pt", weights_only=True)
    for name, tensor in reference.model.state_dict().items():
        torch.testing.assert_close(saved[name], tensor, atol=1e-6, rtol=1e-5)

"""Your own model on the one accumulation contract, also across processes and interruptions (issue 20):
an hf: causal LM on a text file and a factory model on an image folder, each stopped mid-window and
resumed bit for bit, and trained by 2 data-parallel processes (spawned, gloo) equal to 1 process."""

from __future__ import annotations

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.execution.resume import run_checkpoints
from gaccum_core.execution.runner import Runner
from gaccum_core.states import RunState
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import NullSink
from hfmodels import saved_model
from images import write_pngs
from jobs import spawned_runs

WAIT_S = 300  # only so a broken run fails instead of hanging
FACTORY = '''
import torch.nn as nn

def build(input_shape, num_classes):
    channels, height, width = input_shape
    return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, 32), nn.LayerNorm(32), nn.ReLU(),
                         nn.Linear(32, num_classes))
'''
PARAGRAPHS = "\n\n".join(f"Note {i}: " + "tokens of different lengths weigh by count " * (1 + i % 4) for i in range(22))


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """Configs of an hf: llama on a text file and of a factory model on 30 PNGs (24 to train: windows of 16,
    the last of 8), each an epoch or more ending in a partial window."""
    root = tmp_path_factory.mktemp("own")
    (root / "notes.txt").write_text(PARAGRAPHS, encoding="utf-8")
    (root / "my_models.py").write_text(FACTORY, encoding="utf-8")
    images = write_pngs(root / "shapes", per_class=10)
    common = dict(device="cpu", eval_every=4, checkpoint_every=0)
    return {
        "hf_adamw": RunConfig(model=f"hf:{saved_model(tmp_path_factory, 'llama')}", dataset="text",
                              text_file=str(root / "notes.txt"), max_seq_len=32, micro_batch_size=2, accum_steps=4,
                              optimizer="adamw", lr=1e-3, **common),  # 67 sequences: 8 windows of 8, then 3
        "factory_sgd": RunConfig(model=f"{root / 'my_models.py'}:build", dataset="imagefolder", data_dir=str(images),
                                 micro_batch_size=4, accum_steps=4, optimizer="sgd", lr=0.1, epochs=3, **common),
    }


def _ended(runner: Runner, run_id: str):
    snapshot = runner.wait(run_id, timeout=WAIT_S)
    assert snapshot.done, f"run {run_id} never ended"
    return snapshot


@pytest.mark.parametrize("name", ["hf_adamw", "factory_sgd"])
def test_stopped_mid_window_and_resumed_equals_the_uninterrupted_run_bit_for_bit(own, tmp_path, gate, name):
    config = own[name]
    runner = Runner(tmp_path)
    reference = runner.submit(config)
    assert _ended(runner, reference).state == RunState.FINISHED
    gate.hold(3, 2)
    run_id = runner.submit(config)
    gate.wait_until_held()
    runner.stop(run_id)
    gate.release()
    assert _ended(runner, run_id).state == RunState.STOPPED
    assert run_checkpoints(runner.store, run_id).load()["position"]["micro"] == 3  # mid-window: 3 of 4 micro-batches in
    runner.resume(run_id)
    assert _ended(runner, run_id).state == RunState.FINISHED
    a, b = runner.store.load_model(reference), runner.store.load_model(run_id)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ma, mb = runner.store.read_metrics(reference), runner.store.read_metrics(run_id)
    for column in ("loss", "grad_norm", "samples", "tokens"):
        assert ma[column].equals(mb[column]), column
    assert runner.store.read_evals(reference)["test_loss"].equals(runner.store.read_evals(run_id)["test_loss"])
    status = runner.store.read_status(run_id)
    expected = "weights loaded from model.safetensors" if name.startswith("hf") else "initialised with the run's seed"
    assert status["weights"] == expected
    runner.close()


def _parameters(config: RunConfig) -> dict[str, torch.Tensor]:
    engine = Engine(config)
    assert engine.run(NullSink()) == RunState.FINISHED
    return {k: v.detach().clone() for k, v in engine.model.state_dict().items()}


@pytest.mark.multiprocess
def test_two_processes_train_your_own_models_as_one_process_does(own, tmp_path):
    """Each config: 2 processes of b against 1 process of 2b (same k), a partial last window included;
    the hf: model weighs every rank's target tokens by the window's total. Both configs trained one after the
    other in the same two spawned processes (one start, not a torchrun job each)."""
    runs = [config.replace(nproc=2, micro_batch_size=config.micro_batch_size // 2) for config in own.values()]
    for (name, config), run in zip(own.items(), spawned_runs(runs, tmp_path).values()):
        reference = _parameters(config)
        assert run.model.keys() == reference.keys()
        for key in reference:
            torch.testing.assert_close(run.model[key], reference[key], rtol=1e-5, atol=1e-5,
                                       msg=lambda m, key=key, name=name: f"{name} {key}: {m}")
        assert run.metrics["samples"].iloc[-1] < config.effective_batch_size  # the partial last window

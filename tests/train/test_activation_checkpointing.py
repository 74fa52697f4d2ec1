"""Activation checkpointing is exact (issue 32): full and selective against off on the same samples and weights,
over an epoch ending in a partial window — gpt, a saved hf: Llama with attention dropout on, cnn, and under AMP
bf16 — with the state_dict's keys unchanged, a model without blocks refused, and a stop/resume bit-equal.
gpt has no dropout layers (models/gpt.py), so the dropout case is the Llama's attention_dropout."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.states import RunState
from gaccum_core.train.activation import checkpoint_blocks, chosen_blocks
from gaccum_core.train.checks import preflight
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import NullSink
from hfmodels import saved_model
from jobs import WORLD, spawned_runs
from training import trained

PARAGRAPHS = "\n\n".join(f"Note {i}: " + "tokens of different lengths weigh by count " * (1 + i % 4) for i in range(22))
TOLERANCE = 1e-6
MODES = [dict(activation_checkpointing="full"), dict(activation_checkpointing="selective", ac_every=2)]


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    """One epoch each, its last window partial: gpt and an hf: Llama (attention dropout 0.1, on) on a text file
    (67 sequences: 8 windows of 8, then 3), cnn on digits (windows of 192, the last partial)."""
    root = tmp_path_factory.mktemp("ac")
    (root / "notes.txt").write_text(PARAGRAPHS, encoding="utf-8")
    text = dict(dataset="text", text_file=str(root / "notes.txt"), max_seq_len=32, micro_batch_size=2, accum_steps=4,
                optimizer="adamw", lr=1e-3, device="cpu", eval_every=10**9, checkpoint_every=0, epochs=1)
    llama = f"hf:{saved_model(tmp_path_factory, 'llama', dropout=0.1)}"
    return {"gpt": RunConfig(model="gpt", **text),
            "hf": RunConfig(model=llama, no_dropout=False, **text),
            "cnn": RunConfig(model="cnn", dataset="digits", micro_batch_size=64, accum_steps=3, optimizer="sgd",
                             lr=0.1, device="cpu", eval_every=10**9, checkpoint_every=0, epochs=1)}


def _seeded_trained(config: RunConfig) -> torch.Tensor:
    torch.manual_seed(0)  # dropout draws from the global RNG, which the engine leaves alone (the worker seeds it)
    return trained(config)[0]


def _max_delta(config: RunConfig, mode: dict) -> float:
    off, on = _seeded_trained(config), _seeded_trained(config.replace(**mode))
    return (on - off).abs().max().item()


@pytest.mark.parametrize("mode", MODES, ids=["full", "selective"])
@pytest.mark.parametrize("name", ["gpt", "hf", "cnn"])
def test_checkpointed_training_equals_training_without(configs, name, mode):
    assert _max_delta(configs[name], mode) <= TOLERANCE


@pytest.mark.parametrize("name", ["gpt", "hf"])
def test_checkpointed_training_under_bf16_equals_training_without(configs, name):
    config = configs[name].replace(amp="bf16", max_steps=4)
    assert _max_delta(config, MODES[0]) <= TOLERANCE


def test_selective_checkpoints_every_nth_block_from_the_first(configs):
    model = Engine(configs["gpt"]).model
    chosen = chosen_blocks(model, configs["gpt"].replace(activation_checkpointing="selective", ac_every=2))
    assert chosen == list(model.blocks)[::2] and len(model.blocks) > len(chosen) > 0
    assert chosen_blocks(model, configs["gpt"]) == []  # off


@pytest.mark.parametrize("name", ["gpt", "hf", "cnn"])
def test_state_dict_keys_and_parameter_names_stay_the_same(configs, name):
    off = Engine(configs[name]).model
    on = Engine(configs[name].replace(activation_checkpointing="full")).model
    assert list(on.state_dict()) == list(off.state_dict())
    assert [n for n, _ in on.named_parameters()] == [n for n, _ in off.named_parameters()]


def test_a_model_without_blocks_is_refused_naming_the_field(configs):
    with pytest.raises(ConfigError) as caught:
        checkpoint_blocks(nn.Linear(4, 2), configs["cnn"].replace(activation_checkpointing="full"))
    assert caught.value.field == "activation_checkpointing" and "no blocks" in str(caught.value)


def test_stopped_mid_window_and_resumed_equals_the_uninterrupted_run_bit_for_bit(configs):
    config = configs["hf"].replace(activation_checkpointing="selective", ac_every=2)
    torch.manual_seed(0)
    uninterrupted = Engine(config)
    uninterrupted.run(NullSink())
    torch.manual_seed(0)
    stopped, saved, calls = Engine(config), [], []
    # Stopped after 2 steps and the third window's first micro-batches (StopCheck asked once per micro-batch).
    state = stopped.run(NullSink(), should_stop=lambda: calls.append(1) or len(calls) > 10, on_checkpoint=saved.append)
    assert state == RunState.STOPPED and saved[-1]["position"]["micro"] > 0
    resumed = Engine(config)
    resumed.resume_from(saved[-1])
    assert resumed.run(NullSink()) == RunState.FINISHED
    for (name, a), b in zip(uninterrupted.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_checkpointing_keeps_fewer_activations(configs):
    """What autograd holds for one micro-batch's backward shrinks: full < selective < off (gpt)."""
    held = {mode: trained(configs["gpt"].replace(activation_checkpointing=mode, max_steps=1))[1].steps[0]["activation_mb"]
            for mode in ("off", "selective", "full")}
    assert held["full"] < held["selective"] < held["off"]


def test_compiled_checkpointed_training_equals_compiled_training_without(configs):
    """torch.compile traces the checkpointed blocks (as a higher-order op): the weights compiled without, to
    float rounding (inductor may fuse the recomputing graph differently). The cnn: 0.0 here; the gpt measured
    1.4e-6 (compile on vs off itself 6.5e-6), but compiling it twice took 41 s of the suite from a cold cache
    against 7 s for the cnn."""
    config = configs["cnn"].replace(compile="default", max_steps=2)
    assert _max_delta(config, MODES[0]) <= 1e-5


SHARDINGS = {"ddp": dict(sharding="ddp"), "fsdp-last": dict(sharding="fsdp", fsdp_sync="last")}


@pytest.fixture(scope="module")
def two_process_states(configs, tmp_path_factory):
    """2 processes (spawned, gloo), the Llama for 4 steps, in each sharding with and without checkpointing: the 4
    runs one after the other in the same two processes (one start, not a torchrun job each); rank 0's state_dicts.
    Dropout off: the ranks leave the global RNG unseeded, so two runs with dropout draw different masks."""
    runs = [configs["hf"].replace(nproc=WORLD, max_steps=4, no_dropout=True, **sharding, **mode)
            for sharding in SHARDINGS.values() for mode in ({}, MODES[0])]
    return {config: run.model for config, run in spawned_runs(runs, tmp_path_factory.mktemp("ac_ranks")).items()}


@pytest.mark.multiprocess
@pytest.mark.parametrize("sharding", list(SHARDINGS))
def test_two_processes_checkpointed_train_the_weights_they_train_without(configs, two_process_states, sharding):
    """Checkpointing inside DDP and inside each FSDP2 unit: the weights trained without it, to float rounding."""
    config = configs["hf"].replace(nproc=WORLD, max_steps=4, no_dropout=True, **SHARDINGS[sharding])
    off, on = two_process_states[config], two_process_states[config.replace(**MODES[0])]
    assert list(on) == list(off)
    delta = max((on[k] - off[k]).abs().max().item() for k in off)
    print(f"\n{config.sharding} {config.fsdp_sync}: max |Δ| checkpointed vs not {delta}")
    assert delta <= TOLERANCE


def test_preflight_refuses_checkpointing_a_model_without_blocks(tmp_path):
    (tmp_path / "flat.py").write_text("import torch.nn as nn\n\ndef build(input_shape, num_classes):\n"
                                      "    return nn.Linear(64, num_classes)  # its own parameters, no child\n", encoding="utf-8")
    config = RunConfig(model=f"{tmp_path / 'flat.py'}:build", dataset="digits", device="cpu",
                       activation_checkpointing="selective")
    with pytest.raises(ConfigError) as caught:
        preflight(config)
    assert caught.value.field == "activation_checkpointing"

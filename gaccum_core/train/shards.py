"""A sharded (FSDP) run's model and optimizer state on disk, through torch.distributed.checkpoint (DCP).

Each rank writes its own part of the weights and optimizer state into a directory of its own per checkpoint
(checkpoint.dcp/step-N-ID); the rest of the checkpoint (schedule, scaler, RNGs, position, counters) goes into
rank 0's checkpoint.pt, which names that directory and is written after it, atomically: a kill at any moment
leaves checkpoint.pt naming a whole directory. model.pt is the full, unsharded state_dict gathered on rank 0.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

SHARDS_DIR = "checkpoint.dcp"  # in the run directory


def shard_dir_name(step: int) -> str:
    """A new directory's name (relative to the run directory) for a checkpoint at this step: never an old one's."""
    return f"{SHARDS_DIR}/step-{step:09d}-{time.time_ns():x}"


def save_shards(model: torch.nn.Module, optimizer: torch.optim.Optimizer, target: Path) -> None:
    """Every rank writes its part of the model's and optimizer's state into target (a collective)."""
    import torch.distributed.checkpoint as dcp  # imported here: only sharded runs need it (~0.5 s)
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=target)


def load_shards(model: torch.nn.Module, optimizer: torch.optim.Optimizer, source: Path) -> None:
    """Every rank reads its part of the model's and optimizer's state from source (a collective)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=source)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole, unsharded state_dict on rank 0 (on the CPU), empty on the others (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

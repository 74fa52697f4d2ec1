"""A sharded (FSDP) run's model and optimizer state on disk, through torch.distributed.checkpoint (DCP).

Each rank writes its own part of the weights and optimizer state into a directory of its own per checkpoint
(checkpoint.dcp/step-N-ID); the rest of the checkpoint (schedule, scaler, RNGs, position, counters) goes into
rank 0's checkpoint.pt, which names that directory and is written after it, atomically: a kill at any moment
leaves checkpoint.pt naming a whole directory. model.pt is the full, unsharded state_dict gathered on rank 0.

DCP reads a directory's .metadata, and the non-tensor items of its .distcp files, with pickle: loading
them can run code. So checkpoint.pt (read with weights_only=True) records the SHA-256 of every file of the
directory, and each file is checked against it before DCP opens any: before the ranks start, and on each
rank again.
"""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path
from typing import Any

import torch

from gaccum_core.train.checkpoint import CheckpointError

SHARDS_DIR = "checkpoint.dcp"  # in the run directory
_NAME_RE = re.compile(rf"{re.escape(SHARDS_DIR)}/step-\d{{9,}}-[0-9a-f]+")  # what shard_dir_name writes


def shard_dir_name(step: int) -> str:
    """A new directory's name (relative to the run directory) for a checkpoint at this step: never an old one's."""
    return f"{SHARDS_DIR}/step-{step:09d}-{time.time_ns():x}"


def save_shards(model: torch.nn.Module, optimizer: torch.optim.Optimizer, run_dir: Path, name: str,
                digest: bool) -> dict[str, Any]:
    """Every rank writes its part of the model's and optimizer's state into run_dir/name (a collective); what
    checkpoint.pt records of it: the name and, where digest (rank 0), every file's SHA-256."""
    import torch.distributed.checkpoint as dcp  # imported here: only sharded runs need it (~0.5 s)
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=run_dir / name)
    # dcp.save returns on the coordinator (rank 0) after every rank's files and then .metadata are written.
    return {"sharded": name, "sharded_sha256": shard_digests(run_dir / name) if digest else {}}


def load_shards(model: torch.nn.Module, optimizer: torch.optim.Optimizer, run_dir: Path,
                state: dict[str, Any]) -> None:
    """Every rank reads its part of the model's and optimizer's state from the directory checkpoint.pt names
    (a collective), once its files are the ones recorded."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    source = checked_shard_dir(state, run_dir)  # before DCP unpickles anything in it
    model_state, optimizer_state = get_state_dict(model, optimizer)
    shards = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(shards, checkpoint_id=source)
    set_state_dict(model, optimizer, model_state_dict=shards["model"], optim_state_dict=shards["optimizer"])


def shard_digests(directory: Path) -> dict[str, str]:
    """The SHA-256 of every file in a checkpoint's directory, by its name there."""
    return {name: _sha256(directory / name) for name in _file_names(directory)}


def _file_names(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if not p.is_dir())


def _sha256(path: Path) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def checked_shard_dir(state: dict[str, Any], run_dir: Path) -> Path:
    """The directory checkpoint.pt's `sharded` names in run_dir, once each of its files has the SHA-256
    recorded when it was written; CheckpointError naming the first that has not (nothing is unpickled)."""
    name = state.get("sharded")
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise CheckpointError(f"checkpoint.pt's sharded is {name!r}: not a directory {SHARDS_DIR}/step-N-ID "
                              "inside the run directory, where the run writes its sharded state")
    directory = run_dir / name
    if not directory.is_dir():
        what = "is a file, not a directory" if directory.exists() else "is missing"
        raise CheckpointError(f"{name} {what}: checkpoint.pt names it as the run's sharded weights and optimizer "
                              "state")
    recorded = state.get("sharded_sha256")
    if not recorded or not isinstance(recorded, dict):
        raise CheckpointError(f"checkpoint.pt records no SHA-256 of {name}'s files (written before gaccum recorded "
                              "them), so its pickled .metadata cannot be verified before loading: start the run again")
    found = _file_names(directory)
    changed = sorted(set(recorded) ^ set(found))
    if changed:
        what = "is missing" if changed[0] in recorded else "is not one of the files checkpoint.pt recorded"
        raise CheckpointError(f"{name}/{changed[0]} {what}: the sharded checkpoint was changed after it was written")
    for file in found:
        if not (directory / file).is_file():  # a device or a pipe would never end reading
            raise CheckpointError(f"{name}/{file} is not a regular file: the sharded checkpoint was changed after it "
                                  "was written")
        if _sha256(directory / file) != recorded[file]:
            size = (directory / file).stat().st_size
            raise CheckpointError(f"{name}/{file} ({size} bytes) does not match the SHA-256 checkpoint.pt recorded "
                                  "when it was written: damaged or replaced since")
    return directory


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole, unsharded state_dict on rank 0 (on the CPU), empty on the others (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

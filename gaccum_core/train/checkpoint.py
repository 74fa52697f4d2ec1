"""A run's checkpoint, owned here: what it must hold, writing it, reading it back, whether a run with changed
settings may go on from it, and removing its stale parts (torchtitan's CheckpointManager is the model).

checkpoint.pt in the run directory holds what gaccum_core.train.checkpoint_state captures. A sharded (FSDP) run
keeps its model and optimizer state apart, through torch.distributed.checkpoint (DCP): each rank writes its part
into a directory of its own per checkpoint (checkpoint.dcp/step-N-ID), and rank 0's checkpoint.pt, which names
that directory, is written after it, atomically: a kill at any moment leaves checkpoint.pt naming a whole
directory, and the older ones are removed once it does. model.pt is the full, unsharded state_dict gathered on
rank 0.

DCP reads a directory's .metadata, and the non-tensor items of its .distcp files, with pickle: loading them can
run code. So checkpoint.pt (read with weights_only=True) records the SHA-256 of every file of the directory, and
each file is checked against it before DCP opens any: before the ranks start, and on each rank again. A
checkpoint.pt that loads is still checked to hold all that a checkpoint holds, each part of its kind
(check_whole), before a run resumes.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import shutil
import time
from dataclasses import fields
from pathlib import Path
from typing import IO, Any, Callable, Iterator

import torch

from gaccum_core.config import RunConfig
from gaccum_core.words import first_line
from gaccum_core.train.checkpoint_state import FORMAT, Counters, Position

CHECKPOINT_FILE = "checkpoint.pt"  # in the run directory
SHARDS_DIR = "checkpoint.dcp"  # in the run directory
_NAME_RE = re.compile(rf"{re.escape(SHARDS_DIR)}/step-\d{{9,}}-[0-9a-f]+")  # what shard_dir_name writes
LENGTH_FIELDS = ("epochs", "max_steps")  # a resumed run may be planned longer; nothing else may change
FileReplacer = Callable[[Path, Callable[[IO[bytes]], Any]], None]


class CheckpointError(ValueError):
    """A checkpoint that cannot resume this run exactly; the message names what differs."""


class CheckpointManager:
    """One run's checkpoint in its directory: checkpoint.pt and a sharded run's checkpoint.dcp/, written, read,
    checked before a resume, and pruned."""

    def __init__(self, run_dir: Path, replace_file: FileReplacer) -> None:
        """replace_file(path, write): write() into a temporary file beside path, then rename it over path (the run
        store's replace_atomically, which also names a full disk)."""
        self.run_dir, self._replace_file = Path(run_dir), replace_file

    @property
    def path(self) -> Path:
        """checkpoint.pt."""
        return self.run_dir / CHECKPOINT_FILE

    def save(self, state: dict[str, Any]) -> None:
        """Write checkpoint.pt atomically, so a kill at any moment leaves the old checkpoint or the new one; then
        remove the shard directories it no longer names."""
        self._replace_file(self.path, lambda f: torch.save(state, f))
        if "sharded" in state:
            self.prune(state["sharded"])

    def prune(self, kept: str) -> None:
        """Remove a sharded run's checkpoint directories but `kept`, the one checkpoint.pt names (older ones, and
        any a kill left half-written)."""
        kept_path = (self.run_dir / kept).resolve()
        for old in kept_path.parent.iterdir():
            if old.resolve() != kept_path:
                shutil.rmtree(old, ignore_errors=True)

    def load(self, mmap: bool = False) -> dict[str, Any] | None:
        """checkpoint.pt (weights_only=True: tensors, numbers and strings only), or None when there is none.
        A temporary file a kill left behind is never read. mmap: its tensors mapped from the file, not read into
        memory (the ranks of a job on one machine then share the page cache), for a resume that copies them to a GPU:
        one that keeps them (an optimizer's state on the CPU) would keep a replaced checkpoint's disk space."""
        if not self.path.exists():
            return None
        return torch.load(self.path, map_location="cpu", weights_only=True, mmap=mmap)

    def read(self) -> dict[str, Any]:
        """checkpoint.pt to resume from; CheckpointError when there is none or it does not load as a checkpoint."""
        run_id = self.run_dir.name
        try:
            state = self.load()
        except Exception as exc:  # a torn or foreign file: torch.load's errors have many types
            raise CheckpointError(f"checkpoint.pt of run {run_id} cannot be read ({first_line(exc)})") from None
        if state is None:
            raise CheckpointError(f"run {run_id} has no checkpoint.pt: it stopped before its first checkpoint, "
                                  "or was written before checkpoints existed")
        if not isinstance(state, dict):
            raise CheckpointError(f"checkpoint.pt of run {run_id} holds a {type(state).__name__}, "
                                  "not a gaccum checkpoint")
        return state

    def check(self, state: dict[str, Any], config: RunConfig, shapes: dict[str, torch.Size] | None) -> None:
        """Refuse, before any rank starts, a checkpoint a run of these settings cannot go on from (check_resumable,
        against the model's tensor shapes where known), or a sharded run's files other than those it wrote."""
        sharded = config.sharding == "fsdp"
        check_resumable(state, config, sharded, None if sharded else shapes)
        if sharded:
            self.checked_shard_dir(state)

    def save_shards(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, name: str,
                    digest: bool) -> dict[str, Any]:
        """Every rank writes its part of the model's and optimizer's state into the directory `name`
        (shard_dir_name, a collective); what checkpoint.pt records of it: the name and, where digest (rank 0),
        every file's SHA-256."""
        import torch.distributed.checkpoint as dcp  # imported here: only sharded runs need it (~0.5 s)
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optimizer_state = get_state_dict(model, optimizer)
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=self.run_dir / name)
        # dcp.save returns on the coordinator (rank 0) after every rank's files and then .metadata are written.
        return {"sharded": name, "sharded_sha256": _digests(self.run_dir / name) if digest else {}}

    def load_shards(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        """Every rank reads its part of the model's and optimizer's state from the directory checkpoint.pt names
        (a collective), once its files are the ones recorded."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        source = self.checked_shard_dir(state)  # before DCP unpickles anything in it
        model_state, optimizer_state = get_state_dict(model, optimizer)
        shards = {"model": model_state, "optimizer": optimizer_state}
        dcp.load(shards, checkpoint_id=source)
        set_state_dict(model, optimizer, model_state_dict=shards["model"], optim_state_dict=shards["optimizer"])

    def checked_shard_dir(self, state: dict[str, Any]) -> Path:
        """The directory checkpoint.pt's `sharded` names in the run directory, once each of its files has the
        SHA-256 recorded when it was written; CheckpointError naming the first that has not (nothing is unpickled)."""
        name = state.get("sharded")
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise CheckpointError(f"checkpoint.pt's sharded is {name!r}: not a directory {SHARDS_DIR}/step-N-ID "
                                  "inside the run directory, where the run writes its sharded state")
        directory = self.run_dir / name
        if not directory.is_dir():
            what = "is a file, not a directory" if directory.exists() else "is missing"
            raise CheckpointError(f"{name} {what}: checkpoint.pt names it as the run's sharded weights and "
                                  "optimizer state")
        recorded = state.get("sharded_sha256")
        if not recorded or not isinstance(recorded, dict):
            raise CheckpointError(f"checkpoint.pt records no SHA-256 of {name}'s files (written before gaccum "
                                  "recorded them), so its pickled .metadata cannot be verified before loading: "
                                  "start the run again")
        _check_digests(directory, name, recorded)
        return directory


def shard_dir_name(step: int) -> str:
    """A new directory's name (relative to the run directory) for a checkpoint at this step: never an old one's."""
    return f"{SHARDS_DIR}/step-{step:09d}-{time.time_ns():x}"


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A sharded model's whole, unsharded state_dict on rank 0 (on the CPU), empty on the others (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _digests(directory: Path) -> dict[str, str]:
    """The SHA-256 of every file in a checkpoint's directory, by its name there."""
    return {name: file_sha256(directory / name) for name in _file_names(directory)}


def _file_names(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if not p.is_dir())


def file_sha256(path: Path) -> str:
    """The file's SHA-256, in hex."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _check_digests(directory: Path, name: str, recorded: dict[str, str]) -> None:
    """CheckpointError naming the first file of the directory that is not the one recorded (its SHA-256)."""
    found = _file_names(directory)
    changed = sorted(set(recorded) ^ set(found))
    if changed:
        what = "is missing" if changed[0] in recorded else "is not one of the files checkpoint.pt recorded"
        raise CheckpointError(f"{name}/{changed[0]} {what}: the sharded checkpoint was changed after it was written")
    for file in found:
        if not (directory / file).is_file():  # a device or a pipe would never end reading
            raise CheckpointError(f"{name}/{file} is not a regular file: the sharded checkpoint was changed after "
                                  "it was written")
        if file_sha256(directory / file) != recorded[file]:
            size = (directory / file).stat().st_size
            raise CheckpointError(f"{name}/{file} ({size} bytes) does not match the SHA-256 checkpoint.pt "
                                  "recorded when it was written: damaged or replaced since")


def check_resumable(state: dict[str, Any], config: RunConfig, sharded: bool,
                    shapes: dict[str, torch.Size] | None = None, data: str | None = None) -> None:
    """Refuse a checkpoint a run of these settings (and data) cannot continue exactly (check_compatible) or that
    is not whole (check_whole)."""
    check_compatible(state, config, data)
    check_whole(state, sharded, shapes)


def check_compatible(state: dict[str, Any], config: RunConfig, data: str | None = None) -> None:
    """Refuse a checkpoint this run cannot continue exactly: other format, torch, settings (only the run's
    length, LENGTH_FIELDS, may change) or data (data: the DataBundle's identity, when the data is loaded; a
    checkpoint written before it was recorded is not asked)."""
    if state.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint.pt has format {state.get('format')!r}, this gaccum reads {FORMAT}")
    if state.get("torch_version") != torch.__version__:
        raise CheckpointError(f"checkpoint.pt was written by torch {state.get('torch_version')}, this is "
                              f"torch {torch.__version__}: kernels may differ, so the resumed run would not be exact")
    if not isinstance(state.get("config", {}), dict):
        raise CheckpointError(f"checkpoint.pt's config is {_shown(state['config'])}, not the run's settings (a dict)")
    # A setting added since the checkpoint was written reads as its default, as config.json's does.
    saved, wanted = {**RunConfig().to_dict(), **state.get("config", {})}, config.to_dict()
    changed = sorted(k for k in set(saved) | set(wanted)
                     if k not in LENGTH_FIELDS and saved.get(k) != wanted.get(k))
    if changed:
        details = ", ".join(f"{k}: {saved.get(k)!r} -> {wanted.get(k)!r}" for k in changed[:4])
        raise CheckpointError(f"the settings changed since the checkpoint ({details}); only the run's length "
                              f"({', '.join(LENGTH_FIELDS)}) may change on resume")
    recorded = state.get("data")
    if data is not None and isinstance(recorded, str) and recorded and recorded != data:
        raise CheckpointError(f"the data changed since the checkpoint: it was {recorded}, it is {data} now (a "
                              "file edited, added or replaced): the run would go on over other windows; start a "
                              "new run on it")


# What a part of checkpoint.pt is called when it is missing.
_PARTS = {"model": "model weights", "optimizer": "optimizer state", "rng": "random generators' states",
          "counters": "step counters", "position": "position", "sharded": "sharded directory"}


def check_whole(state: dict[str, Any], sharded: bool, shapes: dict[str, torch.Size] | None = None) -> None:
    """Refuse a checkpoint.pt that loads but does not hold what checkpoint_state.capture writes, each part of its
    kind; CheckpointError naming the first part that is not, its value and what belongs there. sharded: the run
    keeps its model and optimizer in checkpoint.dcp (else in checkpoint.pt); shapes: the model's tensors'
    shapes, where known."""
    problem = next(_problems(state, sharded, shapes), None)
    if problem is not None:
        raise CheckpointError(f"checkpoint.pt{problem}: not a whole gaccum checkpoint")


def _problems(state: dict[str, Any], sharded: bool, shapes: dict[str, torch.Size] | None) -> Iterator[str]:
    """What is wrong with each part, as the words after "checkpoint.pt"; nothing for a whole checkpoint.
    Read up to its first problem: each check looks only at parts the ones before it found sound."""
    kept_here = ("rng", "counters", "position") if sharded else ("model", "optimizer", "rng", "counters", "position")
    for part in (*kept_here, *(("sharded",) if sharded else ())):
        if part not in state:
            yield f" lacks its {_PARTS[part]} ({part})"
    if not sharded:
        yield from _model_problems(state["model"], shapes)
        yield from _optimizer_problems(state["optimizer"], state.get("grads"))
    yield from _rng_problems(state["rng"])
    yield from _ranks_rng_problems(state.get("rngs", []))
    yield from _count_problems("counters", state["counters"], Counters, {"last_eval_step": -1})
    if "step" not in state["counters"]:
        yield " lacks its step counters (counters.step)"
    yield from _count_problems("position", state["position"], Position, {})
    for part in ("grads", "in_flight"):
        values = state.get(part, [])
        if not isinstance(values, list) or any(v is not None and not torch.is_tensor(v) for v in values):
            yield f"'s {part} is {_shown(values)}, not a list of tensors"
    micro = state["position"].get("micro", 0)
    if len(state.get("in_flight", [])) != micro:
        yield (f"'s in_flight holds {len(state['in_flight'])} losses, not the {micro} of the micro-batches "
               "position.micro says are done")
    for part, kind in (("scheduler", (dict, type(None))), ("scaler", dict)):
        if not isinstance(state.get(part), kind):
            yield f"'s {part} is {_shown(state.get(part))}, not a state dict"
    wall = state.get("wall_time_s", 0.0)
    if isinstance(wall, bool) or not isinstance(wall, (int, float)) or not math.isfinite(wall) or wall < 0:
        yield f"'s wall_time_s is {_shown(wall)}, not a number of seconds ≥ 0"


def _model_problems(model: Any, shapes: dict[str, torch.Size] | None) -> Iterator[str]:
    if not isinstance(model, dict) or not model or not all(torch.is_tensor(v) for v in model.values()):
        yield f"'s model is {_shown(model)}, not a state_dict of tensors"
        return
    if shapes is None:
        return
    for key in [*(k for k in shapes if k not in model), *(k for k in model if k not in shapes)]:
        yield f"'s model {'lacks' if key in shapes else 'has an unknown tensor'} {key!r}, the model's tensors differ"
    for key, shape in shapes.items():
        if key in model and model[key].shape != shape:
            yield f"'s model[{key!r}] has shape {tuple(model[key].shape)}, the model's is {tuple(shape)}"


def _optimizer_problems(optimizer: Any, grads: Any) -> Iterator[str]:
    whole = isinstance(optimizer, dict) and isinstance(optimizer.get("state"), dict) \
        and isinstance(optimizer.get("param_groups"), list) \
        and all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in optimizer["param_groups"])
    if not whole:
        yield f"'s optimizer is {_shown(optimizer)}, not an optimizer's state_dict (state, param_groups)"
        return
    count = sum(len(g["params"]) for g in optimizer["param_groups"])
    if isinstance(grads, list) and len(grads) != count:
        yield f"'s optimizer steps {count} parameters, its grads hold {len(grads)}: they belong to different models"


def _rng_problems(rng: Any) -> Iterator[str]:
    generator = rng.get("torch") if isinstance(rng, dict) else None
    if not torch.is_tensor(generator) or generator.dtype != torch.uint8 or not generator.numel():
        yield f"'s rng is {_shown(rng)}, not the random generators' states (a ByteTensor 'torch', 'python')"
        return
    python = rng.get("python")
    if not isinstance(python, list) or len(python) != 3 or not isinstance(python[1], list) or \
            len(python[1]) != len(random.getstate()[1]):
        yield f"'s rng['python'] is {_shown(python)}, not Python's random.getstate() as a list"


def _ranks_rng_problems(rngs: Any) -> Iterator[str]:
    """Each rank's generators ("rngs", written by a run of several processes): a list of what "rng" holds."""
    if not isinstance(rngs, list):
        yield f"'s rngs is {_shown(rngs)}, not a list of each rank's random generators' states"
        return
    for rank, rng in enumerate(rngs):
        for problem in _rng_problems(rng):
            yield problem.replace("'s rng", f"'s rngs[{rank}]", 1)


def _count_problems(part: str, values: Any, kind: type, lowest: dict[str, int]) -> Iterator[str]:
    if not isinstance(values, dict):
        yield f"'s {part} is {_shown(values)}, not a dict of whole numbers"
        return
    names = [f.name for f in fields(kind)]
    for key, value in values.items():
        least = lowest.get(key, 0)
        if key not in names:
            yield f"'s {part} has {key!r}: not one of {', '.join(names)}"
        elif isinstance(value, bool) or not isinstance(value, int) or value < least:
            yield f"'s {part}.{key} is {_shown(value)}, not a whole number ≥ {least}"


def _shown(value: Any) -> str:
    """A value as a message shows it: small ones as written, others by their kind."""
    if torch.is_tensor(value):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
    if value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 40):
        return repr(value)
    return f"an empty {type(value).__name__}" if not value and hasattr(value, "__len__") else \
        f"a {type(value).__name__}"

"""Pitfall #6, a mean of per-micro-batch means on sequences, run on the engine itself.

The textbook loop is a setting of the engine: gpt on text, reduction "mean_per_micro_batch" against
"mean" (exact) and one big batch of b*k sequences per step. Each is an Engine run from the weights
config.seed gives every run, reading the same windows, whose weights a metric sink copies after
every optimizer step.
"""

from __future__ import annotations

from typing import Any

import torch

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.lab.pitfalls.catalog import BASE_CONFIG
from gaccum_core.lab.pitfalls.result import PitfallResult, Snapshot, compare, flat
from gaccum_core.train.accumulation import windows_per_epoch
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import Row, RowKeeper

KEY = "mean_of_means_sequences"
# These are the comparison's to set, not the caller's.
FIXED = {"reduction": "mean (correct) and mean_per_micro_batch (the pitfall)", "max_steps": "steps",
         "epochs": "as many as steps need", "eval_every": "never", "checkpoint_every": "never",
         "nproc": "1", "nnodes": "1", "train_samples": "the whole training set"}


class SnapshotSink(RowKeeper):
    """A RowKeeper that also copies the weights each optimizer step left.

    log_step comes right after the optimizer step, so the model's parameters are that step's."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self._params = list(model.parameters())
        self._weights: list[torch.Tensor] = []

    def log_step(self, row: Row) -> None:
        """Keep the step row and a copy of the weights the step left."""
        super().log_step(row)
        self._weights.append(flat(self._params))

    def snapshots(self) -> list[Snapshot]:
        """Each step's weights with its row's grad_norm, loss and samples."""
        return [Snapshot(weights, row["grad_norm"], row["loss"], row["samples"])
                for weights, row in zip(self._weights, self.steps)]


def run_sequences(steps: int, settings: dict[str, Any]) -> PitfallResult:
    """#6 on the engine: reduction mean_per_micro_batch and mean, each against one big batch of b*k
    sequences per step; the three runs start from the same seeded gpt and read the same windows."""
    for name, value in FIXED.items():
        if name in settings:
            raise ConfigError(name, settings[name], f"left to the gallery for this pitfall: {value}")
    config = RunConfig.from_dict({**BASE_CONFIG.to_dict(), **settings, "reduction": "mean"})
    b, k, num_train = config.micro_batch_size, config.accum_steps, len(load_data(config).train)
    if b * k > num_train:  # the reference's one micro-batch would not fit: say so of b, not of b*k
        raise ConfigError("micro_batch_size", b, f"at most {num_train // k} with accum_steps={k}: the big batch "
                          f"of b*k sequences must fit in the {config.dataset} training set ({num_train})")
    reference = _engine_snapshots(config.replace(micro_batch_size=b * k, accum_steps=1), num_train, steps)
    correct = _engine_snapshots(config, num_train, steps)
    pitfall = _engine_snapshots(config.replace(reduction="mean_per_micro_batch"), num_train, steps)
    return compare(KEY, pitfall, reference, correct, reference)


def _engine_snapshots(config: RunConfig, num_train: int, steps: int) -> list[Snapshot]:
    """`steps` optimizer steps of an Engine run, without evaluation."""
    # The run is planned as exactly these steps, so a warmup or cosine schedule spans them, as the image
    # loops' does (Kit's scheduler is made for `steps`).
    per_epoch = windows_per_epoch(num_train, config.micro_batch_size, config.accum_steps)
    engine = Engine(config.replace(epochs=-(-steps // per_epoch), max_steps=steps))
    sink = SnapshotSink(engine.model)
    engine.run(sink, steps=steps, evaluate=False)
    return sink.snapshots()

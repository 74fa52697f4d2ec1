"""Train a config on the engine in the test process: its final parameters, flat, and its rows."""

import torch

from gaccum_core.config import RunConfig
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper


def trained(config: RunConfig) -> tuple[torch.Tensor, RowKeeper]:
    """Every parameter after the run, as one flat tensor, and the step and eval rows it logged."""
    engine = Engine(config)
    rows = RowKeeper()
    engine.run(rows)
    return torch.cat([p.detach().flatten() for p in engine.model.parameters()]), rows

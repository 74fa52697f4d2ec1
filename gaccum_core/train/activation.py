"""Activation checkpointing: a chosen block keeps only its input in the forward and recomputes its activations
during backward (torch.utils.checkpoint, non-reentrant), trading compute for memory with the same gradients.

full checkpoints every block; selective every ac_every-th (blocks 0, N, 2N, …). The blocks are the units FSDP
shards (fsdp.blocks), so with FSDP2 the checkpointing sits inside each sharded unit, as torchtitan orders it.
Only the block's forward is replaced, on the instance: the module tree, and so every state_dict key (model.pt,
checkpoint.pt, an hf: model's weights), stays the same. The RNG state is preserved, so a recomputed dropout
draws the masks the first forward drew.

What it keeps is counted as the engine counts activations (train/memory.SavedBytesPeak): the saved block inputs,
and while a block recomputes, its activations on top of what is held then.
"""

from __future__ import annotations

from functools import partial, wraps
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.train.fsdp import blocks
from gaccum_core.train.memory import counting_meter


def chosen_blocks(model: nn.Module, config: RunConfig) -> list[nn.Module]:
    """The blocks config.activation_checkpointing checkpoints: none, every ac_every-th from the first, or all.
    A model without blocks is refused (ConfigError naming activation_checkpointing)."""
    if config.activation_checkpointing == "off":
        return []
    found = blocks(model)
    if not found:
        raise ConfigError("activation_checkpointing", config.activation_checkpointing,
                          "off for this model: it has no blocks to checkpoint (no transformer blocks, no "
                          "_no_split_modules layers, no top-level child holding parameters)")
    step = 1 if config.activation_checkpointing == "full" else config.ac_every
    return found[::step]


def _checkpointed(forward: Callable[..., Any]) -> Callable[..., Any]:
    """The block's forward, checkpointed; under a saved-bytes meter (the engine measuring a micro-batch size),
    its recomputation is counted too: the first call is the forward, the second the recomputation."""
    @wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        meter = counting_meter()
        if meter is None or not torch.is_grad_enabled() or torch.compiler.is_compiling():
            return checkpoint(forward, *args, use_reentrant=False, preserve_rng_state=True, **kwargs)
        recomputing, calls = meter.recomputes(forward, args, kwargs), []

        def counted(*args: Any, **kwargs: Any) -> Any:
            if calls:
                recomputing()
            calls.append(True)
            return forward(*args, **kwargs)
        return checkpoint(counted, *args, use_reentrant=False, preserve_rng_state=True, **kwargs)
    return run


def checkpoint_blocks(model: nn.Module, config: RunConfig) -> int:
    """Checkpoint the blocks config chooses, in place (before DDP or FSDP wraps the model); how many it chose."""
    chosen = chosen_blocks(model, config)
    for block in chosen:
        block.forward = _checkpointed(partial(type(block).forward, block))
    return len(chosen)

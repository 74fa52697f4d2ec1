"""The activation-checkpointing traps: one gradient on one batch from the same weights, taken three ways.

Each trap checkpoints the model's first block as the tutorials write it; beside it the engine's own
checkpointing (gaccum_core.train.activation: non-reentrant, RNG state preserved) of that same block, which its
selective setting picks with ac_every = the number of blocks; and the plain backward without checkpointing, the
reference. All three run on one copy each of the seeded mlp, on the first window's samples, after one seed.
The dropout case adds a dropout after each hidden ReLU, each hidden Linear, ReLU and dropout one block.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from gaccum_core.data.load import load_data
from gaccum_core.lab.pitfalls.catalog import BASE_CONFIG, CHECKPOINTING_PITFALLS
from gaccum_core.models.build import build_seeded_model
from gaccum_core.seeding import seeded
from gaccum_core.train.activation import checkpoint_blocks
from gaccum_core.train.fsdp import blocks
from gaccum_core.train.weighting import sample_order

REENTRANT, DROPOUT_MASKS = CHECKPOINTING_PITFALLS  # the two keys, in the gallery's order
DROPOUT = 0.3
# The checkpoint() arguments each trap writes; the engine's are use_reentrant=False, preserve_rng_state=True.
TRAP_FLAGS: dict[str, dict[str, Any]] = {REENTRANT: {"use_reentrant": True},
                                         DROPOUT_MASKS: {"use_reentrant": False, "preserve_rng_state": False}}
BLOCK_WORDS = {REENTRANT: "its first Linear (the input: the data batch, no grad)",
               DROPOUT_MASKS: f"its first Linear, ReLU and dropout (p {DROPOUT:g}), in train mode"}
Gradients = dict[str, torch.Tensor | None]


@dataclass(frozen=True)
class CheckpointingCase:
    """One trap's gradient and the engine's checkpointing's, each against the gradient without checkpointing."""

    key: str
    reference_block_norm: float  # L2 norm of the checkpointed block's parameters' gradient, no checkpointing
    trap_block_norm: float  # the same under the trap (0 where .grad is None)
    trap_grad_none: bool  # the trap left every .grad of the block None
    trap_max_diff: float  # max |Δ grad| over every parameter, the trap against no checkpointing
    trap_max_diff_outside: float  # the same over the parameters outside the block
    right_max_diff: float  # max |Δ grad| over every parameter, the engine's checkpointing against none
    warning: str  # what torch warned during the trap's forward and backward ('' if nothing)
    frame: pd.DataFrame  # one row per parameter tensor

    @property
    def verdict(self) -> str:
        """The case in one line: what the trap did to the gradient, and how close the engine's came."""
        right = f"the engine's checkpointing is {self.right_max_diff:.1e} off at most"
        if self.trap_grad_none:
            return (f"The trap leaves the checkpointed block's gradient None (norm {self.reference_block_norm:.3g} "
                    f"without checkpointing) and the others as they should be; {right}.")
        return (f"The trap's gradient is up to {self.trap_max_diff:.2e} off (block norm {self.trap_block_norm:.3g} "
                f"against {self.reference_block_norm:.3g}); {right}.")


def case_words(key: str) -> str:
    """What the case measures, read off its settings: model, data, the batch, the seed and the block."""
    config = BASE_CONFIG
    return (f"{config.model} on {config.dataset}, one batch of {config.effective_batch_size} samples (the first "
            f"window's, b·k = {config.micro_batch_size}·{config.accum_steps}), seed {config.seed}; checkpointed: "
            f"{BLOCK_WORDS[key]}. One gradient each way.")


def run_checkpointing_pitfalls() -> dict[str, CheckpointingCase]:
    """Both traps, by CHECKPOINTING_PITFALLS key in its order."""
    data = load_data(BASE_CONFIG)
    order = sample_order(BASE_CONFIG, data.train, 0)
    x, y = data.train.batch(order[:BASE_CONFIG.effective_batch_size])
    mlp = build_seeded_model(BASE_CONFIG, data.input_shape, data.num_classes)
    return {key: measure(key, _model(key, mlp), x, y) for key in CHECKPOINTING_PITFALLS}


def _model(key: str, mlp: nn.Sequential) -> nn.Sequential:
    """The seeded mlp, or for the dropout case its layers regrouped into blocks with a dropout each."""
    if key != DROPOUT_MASKS:
        return copy.deepcopy(mlp)
    flatten, first, relu, second, relu_again, last = copy.deepcopy(mlp)  # the built-in mlp's six layers
    return nn.Sequential(flatten, nn.Sequential(first, relu, nn.Dropout(DROPOUT)),
                         nn.Sequential(second, relu_again, nn.Dropout(DROPOUT)), last)


def measure(key: str, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> CheckpointingCase:
    """The gradient of the mean loss on (x, y) with no checkpointing, with the trap's checkpointing of the first
    block and with the engine's, each on its own copy of `model` after the same seed."""
    block = _block_name(model)
    reference = _gradients(copy.deepcopy(model), x, y)
    trap_model = copy.deepcopy(model)
    _checkpoint_first_block(trap_model, **TRAP_FLAGS[key])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trap = _gradients(trap_model, x, y)
    right_model = copy.deepcopy(model)
    every = len(blocks(right_model))  # selective, every Nth from the first: block 0 alone
    checkpoint_blocks(right_model, BASE_CONFIG.replace(activation_checkpointing="selective", ac_every=every))
    frame = _frame(block, reference, trap, _gradients(right_model, x, y))
    inside = frame["in_block"]
    return CheckpointingCase(
        key, _norm(frame.loc[inside, "reference_norm"]), _norm(frame.loc[inside, "trap_norm"]),
        bool(frame.loc[inside, "trap_grad_none"].all()), float(frame["trap_max_abs_diff"].max()),
        float(frame.loc[~inside, "trap_max_abs_diff"].max()), float(frame["right_max_abs_diff"].max()),
        "; ".join(dict.fromkeys(str(w.message) for w in caught)), frame)


def _block_name(model: nn.Module) -> str:
    first = blocks(model)[0]
    return next(name for name, child in model.named_children() if child is first)


def _checkpoint_first_block(model: nn.Module, **flags: Any) -> None:
    """The tutorials' line for the first block: its forward through checkpoint(..., **flags)."""
    block = blocks(model)[0]
    plain = block.forward
    block.forward = lambda x: checkpoint(plain, x, **flags)


def _gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Gradients:
    """Each parameter's .grad after one backward of the mean loss, in train mode, right after the config's seed
    (the dropout masks), leaving the global RNG as it was."""
    def backward() -> None:
        model.train()
        F.cross_entropy(model(x), y).backward()

    seeded(BASE_CONFIG.seed, backward)
    return {name: param.grad for name, param in model.named_parameters()}


def _frame(block: str, reference: Gradients, trap: Gradients, right: Gradients) -> pd.DataFrame:
    """One row per parameter: in the checkpointed block or not, the three gradient norms and the largest
    differences from the reference (a None gradient counted as zeros)."""
    rows = []
    for name, ref in reference.items():
        trap_grad, right_grad = _or_zeros(trap[name], ref), _or_zeros(right[name], ref)
        rows.append({"parameter": name, "in_block": name.startswith(f"{block}."),
                     "shape": "×".join(map(str, ref.shape)),
                     "reference_norm": ref.norm().item(), "trap_norm": trap_grad.norm().item(),
                     "right_norm": right_grad.norm().item(), "trap_grad_none": trap[name] is None,
                     "trap_max_abs_diff": (trap_grad - ref).abs().max().item(),
                     "right_max_abs_diff": (right_grad - ref).abs().max().item()})
    return pd.DataFrame(rows)


def _or_zeros(grad: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like) if grad is None else grad


def _norm(norms: pd.Series) -> float:
    """The L2 norm of several tensors' gradients from each one's L2 norm."""
    return float((norms ** 2).sum() ** 0.5)

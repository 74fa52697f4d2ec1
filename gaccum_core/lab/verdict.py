"""Why the accumulated gradient differs from the big batch's: causes detected on the model, per module.

Each reason is found, not guessed: a BatchNorm layer, an active dropout layer, a buffer that one forward
pass changes, the textbook weighting; reduced precision only when none of those is there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from gaccum_core.config import RunConfig
from gaccum_core.words import all_of, plural
from gaccum_core.models.build import active_dropout

if TYPE_CHECKING:  # pandas is imported on use: the command line loads this module in every process
    import pandas as pd

MODULE_COLUMNS = ["module", "parameters", "numel", "worst_rel_l2", "equal", "reason"]
# fp32 rounds at 6e-8 relative; one pass over b·k samples and k passes over b add the same terms
# in another order, which moves a gradient by ~1e-7 (mlp) to ~1e-6 (cnn), while BatchNorm or
# dropout move it by ~1. Under autocast every matmul rounds its output to 8 (bf16) or 11 (fp16)
# mantissa bits, 4e-3 / 5e-4 relative, and the big batch rounds one sum over b·k samples where
# accumulation rounds k sums of b: a few such roundings (measured 2e-3 / 4e-4) stay under 1e-2.
# One table for `check` (relative L2 per parameter tensor) and `verify` (relative max-abs over the model).
TOLERANCES = {"off": 1e-5, "fp16": 1e-2, "bf16": 1e-2}
PRECISION_NAMES = {"off": "fp32", "fp16": "fp16", "bf16": "bf16"}
ROOT = "(model)"  # the module name shown for parameters the model owns itself
DROPOUT_OFF = "--no-dropout on the command line or the \"Dropout off\" box on the pages"


@dataclass(frozen=True)
class Reason:
    """One detected cause: its short name, the layers or buffers it was found at (none: the whole
    model), and a sentence saying why it makes the micro-batches' gradient differ."""

    name: str
    where: tuple[str, ...]
    why: str


def find_reasons(config: RunConfig, model: nn.Module, micro_batch: torch.Tensor, samples: int,
                 finite: bool) -> list[Reason]:
    """The causes of a difference found on this model in train mode (micro_batch: one forward's input)."""
    norms = batch_norms(model)
    drops = active_dropout(model) if model.training else []
    buffers = changed_buffers(model, micro_batch)
    reasons = []
    if norms:
        reasons.append(Reason("BatchNorm", tuple(norms), batch_norm_why(norms, f"micro-batch of "
                              f"{config.micro_batch_size}", f"whole batch of {samples}")))
    if drops:
        reasons.append(Reason("dropout", tuple(drops), f"Dropout layers {quoted(drops)} are active in train mode "
                              "and draw different random masks for the big batch and for the micro-batches: "
                              f"turn dropout off with {DROPOUT_OFF}"))
    if buffers:
        reasons.append(Reason("a buffer updated in forward", tuple(buffers), f"One forward pass changes the "
                              f"buffers {quoted(buffers)}, so each micro-batch's forward sees another value than "
                              "the big batch's did"))
    if config.reduction == "mean_per_micro_batch":
        reasons.append(Reason("textbook weighting", (), "The textbook weighting (reduction mean_per_micro_batch) "
                              "gives each micro-batch 1/k of the step whatever its sample or token count, where "
                              "one big batch weights every one equally"))
    if not reasons and config.amp != "off":
        reasons.append(Reason("reduced precision", (), f"{PRECISION_NAMES[config.amp]} autocast rounds every "
                              "matmul's output, and the big batch rounds other sums than the micro-batches; no "
                              "BatchNorm, dropout, buffer updated in forward or textbook weighting was found: "
                              "compare in fp32 (amp off) to confirm"))
    if not finite:
        reasons.append(Reason("non-finite gradients", (), "Gradients that are inf or NaN cannot be compared"))
    if not reasons:
        reasons.append(Reason("unknown cause", (), "No BatchNorm, active dropout, buffer updated in forward or "
                              "textbook weighting was found: look for layers that mix samples across the batch "
                              "or draw random numbers"))
    return reasons


def batch_norms(model: nn.Module) -> list[str]:
    """The names of the model's BatchNorm layers."""
    return [name for name, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def batch_norm_why(norms: list[str], micro: str = "micro-batch", whole: str = "whole batch") -> str:
    """Why BatchNorm layers make the micro-batches' gradient differ, in one sentence without its full stop."""
    return f"BatchNorm layers {quoted(norms)} normalise each {micro} with its own statistics, not the {whole}"


def tolerance_words(amp: str) -> str:
    """'the fp32 tolerance 1e-05': the bound a relative difference is held to, in `check`'s and `verify`'s words."""
    return f"the {PRECISION_NAMES[amp]} tolerance {TOLERANCES[amp]:g}"


def changed_buffers(model: nn.Module, x: torch.Tensor) -> list[str]:
    """The buffers one forward of x in the model's mode changes, BatchNorm's running statistics left out."""
    norms = set(batch_norms(model))
    before = {name: b.detach().clone() for name, b in model.named_buffers() if _owner(name) not in norms}
    with torch.no_grad():
        model(x)
    after = dict(model.named_buffers())
    return [name for name, old in before.items() if name not in after or not _same(old, after[name])]


def _same(old: torch.Tensor, new: torch.Tensor) -> bool:
    # NaN != NaN, yet a buffer that stays NaN has not changed.
    return old.shape == new.shape and (torch.equal(old, new) or bool(
        old.is_floating_point() and torch.allclose(old, new.to(old.dtype), rtol=0, atol=0, equal_nan=True)))


def module_table(table: pd.DataFrame, differs: pd.Series, reasons: list[Reason]) -> pd.DataFrame:
    """One row per module owning parameters: how many, the worst relative L2 error, and why it differs."""
    rows = []
    for owner, part in table.groupby(table["name"].map(_owner), sort=False):
        equal = not differs[part.index].any()
        rows.append({"module": owner or ROOT, "parameters": len(part), "numel": int(part["numel"].sum()),
                     "worst_rel_l2": part["rel_l2"].max(skipna=False), "equal": equal,
                     "reason": "" if equal else module_reason(owner, reasons)})
    import pandas as pd

    return pd.DataFrame(rows, columns=MODULE_COLUMNS)


def module_reason(module: str, reasons: list[Reason]) -> str:
    """The reasons found in or under the module; 'via' those found elsewhere; the model-wide ones:
    'BatchNorm; via dropout'."""
    def inside(where: str) -> bool:
        return module == "" or where == module or where.startswith(module + ".")

    located = [r for r in reasons if r.where]
    here = [r.name for r in located if any(inside(w) for w in r.where)]
    elsewhere = [r.name for r in located if r.name not in here]
    model_wide = [r.name for r in reasons if not r.where]
    groups = [", ".join(here), "via " + ", ".join(elsewhere) if elsewhere else "", ", ".join(model_wide)]
    return "; ".join(group for group in groups if group)


def verdict_text(config: RunConfig, table: pd.DataFrame, modules: pd.DataFrame, reasons: list[Reason]) -> str:
    """'equal up to float rounding: …' with the largest error when no reasons (the gradients agree), else
    'differs: REASONS (which modules). Why each. …'."""
    bound = tolerance_words(config.amp)
    if not reasons:
        return (f"equal up to float rounding: the largest relative L2 error over {plural(len(table), 'parameter tensor')} "
                f"in {plural(len(modules), 'module')} is {table['rel_l2'].max():.2g}, below {bound}.")
    differing = modules.loc[~modules["equal"]]
    where = (all_of(len(modules), "module") if len(differing) == len(modules) else
             f"{len(differing)} of {plural(len(modules), 'module')}: {quoted(differing['module'].tolist())}")
    return (f"differs: {', '.join(r.name for r in reasons)} ({int(differing['parameters'].sum())} of {len(table)} "
            f"parameter tensors differ beyond {bound}, in {where}). " + " ".join(f"{r.why}." for r in reasons))


def quoted(names: list[str], limit: int = 5) -> str:
    """'a', 'b', … and N more: names for a sentence."""
    shown = ", ".join(f"'{name or ROOT}'" for name in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _owner(name: str) -> str:
    """The module that owns a parameter or buffer: 'layers.0.fc' of 'layers.0.fc.weight'."""
    return name.rpartition(".")[0]

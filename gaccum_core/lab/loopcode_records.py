"""The records tasks' lines of the rendered loop (lab.loopcode): sft aggregated other than by token-mean, and pg.

Such a run weighs each loss token (a completion token's target) over the whole window before its first backward
(train.weighting, train.aggregation): 1/(S·n_s), 1/S, 1/(S·C) or 1/(G·n_g), or 1/tokens for token-mean; pg's
token loss is its record's advantage times its cross-entropy, and its epoch order keeps each group together.
"""

from __future__ import annotations

from gaccum_core.config import RunConfig
from gaccum_core.data.sequences import IGNORE as IGNORE_INDEX  # cross_entropy's ignore_index: no loss
_SEQ_MODES = ("seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
_FIELD_DOCS = {
    "record": "record: the id of the record each loss token belongs to (-1 elsewhere)",
    "advantage": "advantage: float, each loss token's record's advantage (0 elsewhere)",
    "group": "group: each loss token's record's prompt group (-1 elsewhere)",
}


def batch_fields(cfg: RunConfig) -> tuple[str, ...]:
    """What the rendered get_batch returns, in order: x, y, then record, advantage and group where needed."""
    fields = ["x", "y"]
    fields += ["record"] if cfg.loss_agg in _SEQ_MODES else []
    fields += ["advantage"] if cfg.dataset == "pg" else []
    fields += ["group"] if cfg.loss_agg == "group-mean-token-mean" else []
    return tuple(fields)


def batch_doc(cfg: RunConfig) -> tuple[str, ...]:
    """The comment saying what get_batch returns for records (and, for pg, what groups holds)."""
    fields = batch_fields(cfg)
    lines = [f"# get_batch(indices) returns ({', '.join(fields)}) for a 1-D tensor of sample indices, each (B, T),",
             "# padded to the longest sample: x the token ids, y the next token where it is a completion token",
             f"# (a loss token), {IGNORE_INDEX} elsewhere (prompt, a record's first token, padding).",
             *(f"# {_FIELD_DOCS[name]}." for name in fields[2:]),
             "# A sample is one record (packing off) or a row of whole records (packing on)."]
    if cfg.dataset == "pg":
        lines.append("# groups: each sample's prompt group (a packed row: its first record's), kept together.")
    return tuple(lines)


def _unit(cfg: RunConfig) -> str:
    """The tensor naming each loss token's averaging unit: its record or its group."""
    return "group" if cfg.loss_agg == "group-mean-token-mean" else "record"


def helper(cfg: RunConfig) -> list[str]:
    """The module-level loss_tokens helper, for modes that count loss tokens per record or group."""
    if cfg.loss_agg == "token-mean":
        return []
    return ["", "", "def loss_tokens(unit):",
            '    """Loss tokens of each id in `unit` (a record\'s or a group\'s id per target, -1: no loss)."""',
            "    return torch.bincount(unit[unit >= 0], minlength=1)"]


def norm_constant(cfg: RunConfig) -> list[str]:
    """seq-mean-token-sum-norm's C: the config's, or the longest completion of the training split, counted once."""
    if cfg.loss_agg != "seq-mean-token-sum-norm":
        return []
    if cfg.loss_agg_norm:
        return [f"norm_c = {cfg.loss_agg_norm}  # C: every sequence's token-loss sum is divided by it"]
    return ["# C: the longest completion (one record's loss tokens) of the training split after truncation.",
            "norm_c = max(int(loss_tokens(get_batch(torch.tensor([i]))[2]).max()) for i in range(num_samples))"]


def order(cfg: RunConfig) -> list[str]:
    """The epoch's sample order: pg's keeps each group's samples together, its groups in a random order."""
    if cfg.dataset != "pg":
        return ["order = torch.randperm(num_samples, generator=generator)"]
    return ["group_ids = groups.unique()  # sorted",
            "# Whole groups, in a random order of groups; a group's samples in their own order.",
            "group_order = torch.randperm(len(group_ids), generator=generator)",
            "order = torch.cat([torch.nonzero(groups == group_ids[g]).flatten() for g in group_order])"]


def _unpacked(cfg: RunConfig, wanted: tuple[str, ...]) -> str:
    """get_batch's fields as loop targets, `_` for those not wanted."""
    return ", ".join(name if name in wanted else "_" for name in batch_fields(cfg))


def _counts(cfg: RunConfig, window: bool) -> list[str]:
    """The count lines: over the window's batches (before its first backward), or over this micro-batch."""
    if cfg.loss_agg == "token-mean":
        counted = f"(y != {IGNORE_INDEX}).sum()"
        total = f"sum(int({counted}) for {_unpacked(cfg, ('y',))} in batches)" if window else f"int({counted})"
        return [f"tokens = {total}  # loss tokens"]
    unit = _unit(cfg)
    units = "G: groups" if unit == "group" else "S: records"
    ids = f"torch.cat([{unit}.flatten() for {_unpacked(cfg, (unit,))} in batches])" if window else unit
    where = ".to(device)" if window else ""  # counted on the host, read beside the device's targets
    return [f"# Loss tokens of each {unit} id, and {units} with loss tokens.",
            f"tokens = loss_tokens({ids}){where}", "units = int((tokens > 0).sum())"]


def sharded_window_start(cfg: RunConfig, header: list[str]) -> list[str]:
    """FSDP: the micro-batch loop's header (this process's share, fsdp_loop.micro_batch_header) with the counts its
    weights need over every process's records: the window's before its first backward (mean), or the whole
    micro-batch's, all N*b, before its backward (mean_per_micro_batch: the textbook's micro-batch is the global one)."""
    if cfg.reduction == "mean":
        return ["# Every loss token's weight is counted over the whole window (every process's records),",
                "# before its first backward.",
                "starts = range(0, len(window), micro_batch_size)",
                "batches = [get_batch(window[s:s + micro_batch_size]) for s in starts]",
                *_counts(cfg, True), *header]
    if cfg.reduction == "sum":
        return header
    return [*header, "    # reduction=mean_per_micro_batch: counted over the whole micro-batch (every process's N*b).",
            "    batches = [get_batch(share)]", *("    " + line for line in _counts(cfg, True))]


def window_start(cfg: RunConfig) -> list[str]:
    """Before the window's first micro-batch: its counts (reduction mean), and the micro-batch loop's header."""
    fields = ", ".join(batch_fields(cfg))
    if cfg.reduction != "mean":
        return ["for micro_start in range(0, len(window), micro_batch_size):",
                f"    {fields} = get_batch(window[micro_start:micro_start + micro_batch_size])"]
    return ["# Every loss token's weight is counted over the whole window, before its first backward.",
            "starts = range(0, len(window), micro_batch_size)",
            "batches = [get_batch(window[s:s + micro_batch_size]) for s in starts]",
            *_counts(cfg, True), f"for {fields} in batches:"]


def loss(cfg: RunConfig, args: str, counted: bool = False) -> list[str]:
    """The micro-batch's weighted loss: Σ weight · (advantage ·) cross-entropy over its loss tokens (counted: the
    micro-batch's counts were made before, as the FSDP loop makes them over every process's share)."""
    per_micro = cfg.reduction == "mean_per_micro_batch"
    lines = []
    if per_micro:
        lines += (["# reduction=mean_per_micro_batch: divided by k (NOT exact: a loss token of a short",
                   "# micro-batch weighs more)."] if counted else
                  ["# reduction=mean_per_micro_batch: counted within this micro-batch, then divided by k",
                   "# (NOT exact: a loss token of a short micro-batch weighs more).", *_counts(cfg, False)])
    lines.append(f'token_loss = F.cross_entropy({args}, reduction="none")  # (B*T,)')
    if cfg.dataset == "pg":
        lines.append("token_loss = advantage.flatten() * token_loss  # -A·log p: the record's advantage A")
    k = " / accum_steps" if per_micro else ""
    weighing = {
        "token-mean": ("token-mean: every loss token alike", "token_loss.sum() / tokens"),
        "seq-mean-token-sum": ("seq-mean-token-sum: each record's token-loss sum, averaged over records",
                               "token_loss.sum() / units"),
        "seq-mean-token-sum-norm": ("seq-mean-token-sum-norm: each record's token-loss sum / C, averaged over "
                                    "records", "token_loss.sum() / (units * norm_c)"),
    }
    if cfg.reduction == "sum":
        return [*lines, "# reduction=sum: every loss token adds its full gradient.", "loss = token_loss.sum()"]
    if cfg.loss_agg in weighing:
        comment, value = weighing[cfg.loss_agg]
        return [*lines, f"# {comment}.", f"loss = {value}{k}"]
    unit = _unit(cfg)
    return [*lines, f"# {cfg.loss_agg}: each {unit}'s token mean, averaged over {unit}s: weight 1/(units·n).",
            f"{unit} = {unit}.flatten()",
            f"weight = torch.where({unit} >= 0, 1 / (units * tokens[{unit}.clamp(min=0)]), 0.0)",
            f"loss = (weight * token_loss).sum(){k}"]

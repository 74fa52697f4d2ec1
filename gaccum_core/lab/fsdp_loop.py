"""The lines of "The loop you are running" that sharding fsdp changes: each process's share of every
micro-batch, fully_shard on each block and the root (MixedPrecisionPolicy under AMP), when gradients are
reduce-scattered and weights resharded (fsdp_sync, fsdp_reshard_after_backward), and the loss scaled by N.

Pure text: render_loop (lab.loopcode) puts these lines where the one-process loop has its own.
"""

from __future__ import annotations

from gaccum_core.config import RunConfig

_POLICY_DTYPES = {"fp16": "torch.float16", "bf16": "torch.bfloat16"}


def is_sharded(cfg: RunConfig) -> bool:
    """Whether the loop is FSDP2's, run by every process (a valid fsdp config has N > 1)."""
    return cfg.sharding == "fsdp"


def note(cfg: RunConfig, weighted: bool = False) -> list[str]:
    """What the processes do, above the loop each of them runs (weighted: a records run weighing its loss tokens)."""
    n, b = cfg.world_size, cfg.micro_batch_size
    unit = "target tokens" if cfg.is_text else "samples"
    sync = ("# fsdp_sync=every: gradients are reduce-scattered after every backward (each process keeps 1/N).",) if cfg.fsdp_sync == "every" else (
            "# fsdp_sync=last: gradients are reduce-scattered only after a window's last backward (k times fewer",
            "# collectives); until then each process accumulates the whole unsharded fp32 gradient.")
    return [f"# Run as N={n} processes under torchrun, sharded with FSDP2 (fully_shard): each process holds 1/N",
            "# of every weight, gradient and optimizer state, all-gathers a block's weights just before it computes,",
            f"# and runs train() below on its own b={b} of every micro-batch of N*b={n * b} {_unit(cfg)}.", *sync,
            *(("# Each process multiplies its loss by N (FSDP averages the processes' gradients); its loss tokens'",
               "# weights are counted over every process's records: the update is exactly that of one process with",
               "# micro-batches of N*b.") if weighted else
              ("# Each process multiplies its loss by N (FSDP averages the processes' gradients); a mean divides by",
               f"# the window's {unit}: the update is exactly that of one process with micro-batches of N*b.")),
            "# Before train(): dist.init_process_group() (torchrun sets each process's rank and the world size).", ""]


def _unit(cfg: RunConfig) -> str:
    return "sequences" if cfg.is_text else "samples"


def imports(cfg: RunConfig) -> list[str]:
    """The imports the sharded loop adds after torch's."""
    names = "MixedPrecisionPolicy, fully_shard" if cfg.amp != "off" else "fully_shard"
    return ["import torch.distributed as dist", f"from torch.distributed.fsdp import {names}"]


def constants(cfg: RunConfig) -> list[str]:
    """The batch constants of the sharded loop: b per process, N, and the window of N*b*k."""
    return [f"micro_batch_size = {cfg.micro_batch_size}  # b: {_unit(cfg)} per forward/backward pass, per process",
            f"accum_steps = {cfg.accum_steps}  # k: micro-batches whose gradients add up before one step",
            f"world_size = {cfg.world_size}  # N: the processes torchrun starts, each running train()",
            "global_micro_batch = world_size * micro_batch_size  # N*b: one micro-batch over all processes",
            "window_size = global_micro_batch * accum_steps  # the effective batch size N*b*k"]


def shard(cfg: RunConfig) -> list[str]:
    """fully_shard on each block, then on the root; under AMP, weights gathered in the reduced dtype."""
    lines = ["rank = dist.get_rank()  # which b of every micro-batch this process takes",
             "# Shard each block, then the root (what is left: embeddings, head): a block's weights are",
             "# all-gathered just before it computes and freed after; the optimizer, built on the sharded",
             "# parameters next, keeps only this process's 1/N of its state."]
    option = ""
    if cfg.amp != "off":
        lines += ["# Weights gathered in the reduced precision, gradients reduced in fp32.",
                  f"policy = MixedPrecisionPolicy(param_dtype={_POLICY_DTYPES[cfg.amp]}, reduce_dtype=torch.float32)"]
        option = ", mp_policy=policy"
    return lines + ["for block in blocks:", f"    fully_shard(block{option})", f"fully_shard(model{option})"]


def window_start(cfg: RunConfig, ignore_index: int) -> list[str]:
    """The micro-batch loop's header: the window's target tokens first (text mean: every process's), then per
    micro-batch whether it ends the window, the sync and reshard it gets, and this process's share."""
    lines = []
    if cfg.is_text and cfg.reduction == "mean":
        lines += ["# Every loss is divided by the window's target tokens, every process's: count them first.",
                  "window_tokens = sum(int((get_batch(window[s:s + micro_batch_size])[1] != "
                  f"{ignore_index}).sum())",
                  "                    for s in range(0, len(window), micro_batch_size))  # padding has no target"]
    lines += micro_batch_header(cfg)
    if cfg.reduction == "mean_per_micro_batch":  # the textbook's mean over the whole micro-batch (all N*b), / k
        count = f"int((get_batch(share)[1] != {ignore_index}).sum())" if cfg.is_text else "len(share)"
        lines.append(f"    divisor = {count} * accum_steps")
    return lines


def micro_batch_header(cfg: RunConfig, fields: tuple[str, ...] = ("x", "y")) -> list[str]:
    """Per micro-batch: whether it ends the window, the sync and reshard it gets, and this process's share (get_batch
    returning `fields`)."""
    sync = _sync(cfg)
    return ["for micro_start in range(0, len(window), global_micro_batch):",
            *(["    last = micro_start + global_micro_batch >= len(window)  # the window's last micro-batch"]
              if sync else []),
            *("    " + line for line in sync),
            "    share = window[micro_start:micro_start + global_micro_batch]  # every process's N*b",
            "    # This process's b (fewer, or none, in an epoch's last micro-batch: every process still runs",
            "    # it, since each backward's collectives need them all).",
            "    mine = share[rank * micro_batch_size:(rank + 1) * micro_batch_size]",
            f"    {', '.join(fields)} = get_batch(mine)"]


def _sync(cfg: RunConfig) -> list[str]:
    """When this micro-batch's gradients are reduce-scattered and its gathered weights freed."""
    lines = []
    if cfg.fsdp_sync == "last":
        lines += ["# fsdp_sync=last: no reduce-scatter until the window's last backward.",
                  "model.set_requires_gradient_sync(last)"]
    if cfg.fsdp_reshard_after_backward == "off":
        lines += ["# Reshard after backward off: keep the gathered weights for the next micro-batch (fewer",
                  "# all-gathers, more memory); the window's last backward frees them.",
                  "model.set_reshard_after_backward(last)"]
    return lines


def scaled(loss_lines: list[str]) -> list[str]:
    """A records loop's weighted loss lines, then times N: each process's share of the one-process loss."""
    return [*loss_lines, "loss = loss * world_size  # * N: FSDP averages the N processes' gradients"]


def loss(cfg: RunConfig, args: str) -> list[str]:
    """The loss of one process: its summed loss times N over what one process's loop divides by."""
    count = {"mean": "window_tokens" if cfg.is_text else "len(window)", "sum": "", "mean_per_micro_batch": "divisor"}
    divisor = f" / {count[cfg.reduction]}" if count[cfg.reduction] else ""
    return [f'loss_sum = F.cross_entropy({args}, reduction="sum")',
            f"loss = loss_sum * world_size{divisor}  # * N: FSDP averages the N processes' gradients"]

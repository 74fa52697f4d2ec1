"""The plain-PyTorch training loop a RunConfig stands for, rendered as readable Python source.

The dashboard shows it under "The loop you are running": the loop the engine runs, written the way
a person would write it, with only the lines this config needs (no branches for disabled features).
Images: logits (B, classes) against labels. Text (gpt): token ids in, logits (B, T, vocab) flattened
against next-token targets, padding's targets -100 (ignored); a mean divides by the window's target
tokens, counted before its backward passes. Records (sft, pg): their loss tokens weighed by the run's loss
aggregation, pg's advantages and grouped order (loopcode_records).
"""

from __future__ import annotations

from gaccum_core.config import RECORD_DATASETS, RunConfig
from gaccum_core.lab import fsdp_loop, loopcode_records as records
from gaccum_core.train.weighting import uses_weights

_OPTIMIZERS = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW"}
_GET_BATCH_DOC = (
    "# get_batch(indices) returns (x, y) for a 1-D tensor of sample indices; for a torch Dataset `ds`:",
    "#     get_batch = lambda idx: torch.utils.data.default_collate([ds[i] for i in idx.tolist()])",
)
_GET_TEXT_BATCH_DOC = (
    "# get_batch(indices) returns (x, y) for a 1-D tensor of sequence indices, both (B, T) int64 and padded",
    "# to the longest sequence: x the token ids (padding 0), y the next token at every position (-100",
    "# where padded: no target). A sequence of L tokens holds L - 1 targets.",
)
# An hf: model's batches pad with -1, which its wrapper turns into the attention mask.
_GET_HF_BATCH_DOC = (_GET_TEXT_BATCH_DOC[0],
                     "# to the longest sequence: x the token ids (padding -1: model(x) masks it out of attention), y the",
                     "# next token at every position (-100 where padded: no target). A sequence of L tokens holds L - 1 targets.")
IGNORE_INDEX = -100  # cross_entropy's ignore_index, the targets of padding (gaccum_core.data.text.IGNORE)


def render_loop(config: RunConfig) -> str:
    """The training loop the engine runs for this config, as Python source ending in a newline.

    A DDP config renders as the one-process loop whose update it equals (micro-batch N·b); an FSDP one as
    the loop each of its processes runs."""
    sharded = fsdp_loop.is_sharded(config)
    if config.world_size > 1 and not sharded:
        single = config.replace(micro_batch_size=config.world_size * config.micro_batch_size, nproc=1, nnodes=1)
        return "\n".join(_data_parallel_note(config)) + "\n" + render_loop(single)
    signature = "model, blocks, get_batch, num_samples, device" if sharded else "model, get_batch, num_samples, device"
    if config.dataset == "pg":
        signature = signature.replace("num_samples", "num_samples, groups")
    doc = ("Shard model (blocks first), train it on this process's share" if sharded
           else "Train model in place on samples 0..num_samples-1")
    helper = records.helper(config) if uses_weights(config) else []
    note = fsdp_loop.note(config, uses_weights(config)) if sharded else []
    lines = [*note, *_header(config), "", *_constants(config), *helper, "", "",
             f"def train({signature}):",
             f'    """{doc} as gaccum does; returns the model."""',
             *_indent(_setup(config), 1), *_indent(_loop(config), 1), "    return model"]
    return "\n".join(lines) + "\n"


def _data_parallel_note(cfg: RunConfig) -> list[str]:
    n, b = cfg.world_size, cfg.micro_batch_size
    unit = "target tokens" if cfg.is_text else "samples"
    divisor = {"mean": f"(window {unit} / N)", "sum": "1/N",
               "mean_per_micro_batch": f"(micro-batch {unit} * k / N)"}[cfg.reduction]
    sync = (["# Every micro-batch all-reduces its gradients (no_sync off)."] if cfg.sync_every_micro_batch else
            ["# Every micro-batch but a window's last runs inside model.no_sync(): gradients are all-reduced",
             "# once per optimizer step."])
    return [f"# Run as N={n} data-parallel processes (DistributedDataParallel under torchrun): each process",
            f"# takes its b={b} of every micro-batch of N*b={n * b} {_unit(cfg)} below and divides its loss sum",
            f"# by {divisor}, since DDP averages the processes' gradients.", *sync,
            "# The update is exactly that of this one-process loop:", ""]


def _indent(lines: list[str], levels: int) -> list[str]:
    return [("    " * levels + line) if line else "" for line in lines]


def _uses_scheduler(cfg: RunConfig) -> bool:
    return cfg.lr_schedule != "constant" or cfg.warmup_steps > 0


def _unit(cfg: RunConfig) -> str:
    """What a micro-batch holds: samples (images) or sequences (text)."""
    return "sequences" if cfg.is_text else "samples"


def _batch_doc(cfg: RunConfig) -> tuple[str, ...]:
    if not cfg.is_text:
        return _GET_BATCH_DOC
    if cfg.dataset in RECORD_DATASETS:
        return records.batch_doc(cfg)
    return _GET_TEXT_BATCH_DOC if cfg.model == "gpt" else _GET_HF_BATCH_DOC


def _header(cfg: RunConfig) -> list[str]:
    amp = {"off": "fp32", "fp16": "fp16 autocast + GradScaler", "bf16": "bf16 autocast"}[cfg.amp]
    model = f"gpt ({cfg.gpt_preset})" if cfg.model == "gpt" else cfg.model
    unit = _unit(cfg)
    held = f"{unit} (of up to {cfg.max_seq_len} tokens)" if cfg.is_text else unit
    sharded = fsdp_loop.is_sharded(cfg)
    n, runs = (f"N={cfg.world_size} x ", "each process runs") if sharded else ("", "gaccum runs")
    lines = [f"# The loop {runs} for {model} on {cfg.dataset}, {amp}: {n}b={cfg.micro_batch_size} x "
             f"k={cfg.accum_steps} = {cfg.effective_batch_size}",
             f"# {held} per optimizer step, the same {unit} one batch of {'N*' if sharded else ''}b*k would hold.",
             *(_batch_doc(cfg)), ""]
    stdlib = ["import gc"] if cfg.clear_cache != "off" else []
    stdlib += ["import math"] if cfg.lr_schedule == "cosine" else []
    torch_lines = ["import torch", *(["import torch.distributed as dist"] if sharded else []),
                   "import torch.nn.functional as F", *(fsdp_loop.imports(cfg)[1:] if sharded else [])]
    return lines + stdlib + ([""] if stdlib else []) + torch_lines


def _constants(cfg: RunConfig) -> list[str]:
    batch = fsdp_loop.constants(cfg) if fsdp_loop.is_sharded(cfg) else [
        f"micro_batch_size = {cfg.micro_batch_size}  # b: {_unit(cfg)} per forward/backward pass",
        f"accum_steps = {cfg.accum_steps}  # k: micro-batches whose gradients add up before one step",
        "window_size = micro_batch_size * accum_steps  # the effective batch size"]
    lines = [*batch, f"epochs = {cfg.epochs}",
             f"seed = {cfg.seed}  # fixes the sample order of every epoch"]
    if cfg.max_steps:
        lines.append(f"max_steps = {cfg.max_steps}  # stop after this many optimizer steps")
    if cfg.warmup_steps:
        lines.append(f"warmup_steps = {cfg.warmup_steps}  # optimizer steps of linear lr warmup")
    if cfg.grad_clip > 0:
        lines.append(f"grad_clip = {cfg.grad_clip!r}  # max L2 norm of all gradients together")
    return lines


def _setup(cfg: RunConfig) -> list[str]:
    extra = f", momentum={cfg.momentum!r}" if cfg.optimizer == "sgd" else ""
    lines = ["model = model.to(device)", "model.train()",
             *(fsdp_loop.shard(cfg) if fsdp_loop.is_sharded(cfg) else []),
             f"optimizer = torch.optim.{_OPTIMIZERS[cfg.optimizer]}(model.parameters(), lr={cfg.lr!r}"
             f"{extra}, weight_decay={cfg.weight_decay!r})"]
    if cfg.amp == "fp16":
        lines += ["# Small fp16 gradients underflow to 0: scale the loss up, unscale before the step.",
                  f"scaler = torch.amp.GradScaler(device.type, init_scale={cfg.init_scale!r}, "
                  f"growth_interval={cfg.growth_interval})"]
    if cfg.compile != "off":
        mode = "" if cfg.compile == "default" else f', mode="{cfg.compile}"'
        lines.append(f"model = torch.compile(model{mode})  # same parameters, compiled forward")
    return lines + _scheduler(cfg) + (records.norm_constant(cfg) if uses_weights(cfg) else [])


def _scheduler(cfg: RunConfig) -> list[str]:
    if not _uses_scheduler(cfg):
        return []
    lines = []
    if cfg.lr_schedule == "cosine":
        total = "min(epochs * steps_per_epoch, max_steps)" if cfg.max_steps else "epochs * steps_per_epoch"
        lines += ["steps_per_epoch = -(-num_samples // window_size)  # ceil: a partial last window is a step",
                  f"total_steps = {total}"]
    lines += ["", "def lr_factor(step):  # multiplies lr at optimizer step `step` (0-based)"]
    if cfg.warmup_steps:
        lines += ["    if step < warmup_steps:",
                  "        return (step + 1) / (warmup_steps + 1)  # linear warmup"]
    if cfg.lr_schedule == "constant":
        lines.append("    return 1.0")
    else:
        after = "step - warmup_steps" if cfg.warmup_steps else "step"
        span = "total_steps - warmup_steps" if cfg.warmup_steps else "total_steps"
        lines += [f"    progress = min(({after}) / max({span}, 1), 1.0)",
                  "    return 0.5 * (1.0 + math.cos(math.pi * progress))  # cosine decay towards 0"]
    return lines + ["", "scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)"]


def _loop(cfg: RunConfig) -> list[str]:
    seed = "seed * 1_000_003 + epoch"
    if cfg.seed * 1_000_003 + cfg.epochs - 1 >= 2**63:
        seed = f"({seed}) % 2**63"  # manual_seed takes at most 63 bits here
    lines = ["step = 0"] if cfg.max_steps else []
    lines += ["for epoch in range(epochs):",
              "    # The order depends on (seed, epoch) only, never on b or k.",
              f"    generator = torch.Generator().manual_seed({seed})",
              *_indent(records.order(cfg), 1),
              "    for start in range(0, num_samples, window_size):",
              "        window = order[start:start + window_size]  # the epoch's last window may be shorter",
              *_indent(_window_start(cfg), 2),
              *_indent(_micro_batch(cfg), 3),
              *_indent(_optimizer_step(cfg), 2)]
    return lines


def _counts_window_tokens(cfg: RunConfig) -> bool:
    """Text with an exact mean: the window's target tokens are counted before its first backward."""
    return cfg.is_text and cfg.reduction == "mean"


def _window_start(cfg: RunConfig) -> list[str]:
    """What a window needs before its first micro-batch, and the micro-batch loop's header."""
    sharded = fsdp_loop.is_sharded(cfg)
    if sharded and uses_weights(cfg):
        return records.sharded_window_start(cfg, fsdp_loop.micro_batch_header(cfg, records.batch_fields(cfg)))
    if sharded:
        return fsdp_loop.window_start(cfg, IGNORE_INDEX)
    if uses_weights(cfg):
        return records.window_start(cfg)
    if _counts_window_tokens(cfg):
        return [
            "# Every micro-batch's loss is divided by the window's target tokens: count them first.",
            "starts = range(0, len(window), micro_batch_size)",
            "batches = [get_batch(window[s:s + micro_batch_size]) for s in starts]",
            f"window_tokens = sum(int((y != {IGNORE_INDEX}).sum()) for _, y in batches)  # padding has no target",
            "for x, y in batches:"]
    return ["for micro_start in range(0, len(window), micro_batch_size):",
            "    x, y = get_batch(window[micro_start:micro_start + micro_batch_size])"]


def _micro_batch(cfg: RunConfig) -> list[str]:
    text = cfg.is_text
    shape = "(B, T, vocab): next-token logits" if text else "(B, classes)"
    fields = records.batch_fields(cfg) if uses_weights(cfg) else ("x", "y")
    lines = [f"{', '.join(fields)} = {', '.join(f'{name}.to(device)' for name in fields)}"]
    if cfg.amp == "off":
        lines.append(f"logits = model(x)  # {shape}")
    else:
        dtype = "float16" if cfg.amp == "fp16" else "bfloat16"
        lines += [f"with torch.autocast(device_type=device.type, dtype=torch.{dtype}):",
                  f"    logits = model(x)  # {shape}, computed in reduced precision"]
    if text:
        lines += ["logits, y = logits.float().flatten(0, 1), y.flatten()  # (B*T, vocab) and (B*T,) targets"]
        args = f"logits, y, ignore_index={IGNORE_INDEX}"  # padding's targets add nothing
    else:
        args = "logits.float(), y"
    lines += _loss(cfg, args)
    backward = "scaler.scale(loss).backward()" if cfg.amp == "fp16" else "loss.backward()"
    lines.append(f"{backward}  # gradients add up in .grad across the window")
    if cfg.clear_cache == "micro":
        lines += ["# clear_cache=micro: free garbage and cached CUDA memory after every backward.",
                  *_clear_cache()]
    return lines


def _loss(cfg: RunConfig, args: str) -> list[str]:
    """The micro-batch's weighted loss, whose backward adds its share of the window's gradient: one process's,
    or under FSDP the same comments over each process's loss."""
    if uses_weights(cfg):
        if fsdp_loop.is_sharded(cfg):
            return fsdp_loop.scaled(records.loss(cfg, args, counted=cfg.reduction == "mean_per_micro_batch"))
        return records.loss(cfg, args)
    lines = _one_process_loss(cfg, args)
    return [*lines[:-1], *fsdp_loop.loss(cfg, args)] if fsdp_loop.is_sharded(cfg) else lines


def _one_process_loss(cfg: RunConfig, args: str) -> list[str]:
    """The comments and the loss line of the one-process loop."""
    text = cfg.is_text
    unit = "token" if text else "sample"
    if cfg.reduction == "mean" and text:
        return ["# Summed over the micro-batch's target tokens (padding ignored), then divided by the",
                "# window's: the accumulated gradient is the per-token mean over the whole window, exact",
                "# although micro-batches hold different token counts (a mean per micro-batch / k is not).",
                f'loss = F.cross_entropy({args}, reduction="sum") / window_tokens']
    if cfg.reduction == "mean":
        return ["# Summed, then divided by the window's sample count: the accumulated gradient is the",
                "# window mean, exact even for a short last micro-batch or a partial last window",
                "# (loss / accum_steps would give a short micro-batch's samples too much weight).",
                f'loss = F.cross_entropy({args}, reduction="sum") / len(window)']
    if cfg.reduction == "sum":
        return [f"# reduction=sum: every {unit} adds its full gradient, so it grows with the window.",
                f'loss = F.cross_entropy({args}, reduction="sum")']
    own = "its own target tokens" if text else "its own samples"
    return ["# reduction=mean_per_micro_batch, the textbook loop: each micro-batch's mean loss",
            f"# (over {own}) divided by k = accum_steps, in a partial last window too.",
            f"# NOT exact when micro-batches hold different {unit} counts: a {unit} of a short micro-batch",
            "# then weighs more than one of a full micro-batch, where the one-big-batch mean weighs every",
            f"# {unit} alike.",
            f"loss = F.cross_entropy({args}) / accum_steps"]


def _optimizer_step(cfg: RunConfig) -> list[str]:
    fp16, clip = cfg.amp == "fp16", cfg.grad_clip > 0
    lines = ["# Window done: one optimizer step on the accumulated gradients."]
    if fp16 and clip:
        lines.append("scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones")
    if clip:
        lines.append("torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)")
    if fp16 and _uses_scheduler(cfg):
        lines.append("scale = scaler.get_scale()")
    if fp16:
        lines += ["scaler.step(optimizer)  # skipped when the gradients hold inf/NaN",
                  "scaler.update()  # halves the scale after a skip, doubles it after clean runs"]
    else:
        lines.append("optimizer.step()")
    if fp16 and _uses_scheduler(cfg):
        lines += ["if scaler.get_scale() >= scale:  # the scale drops only when the step was skipped",
                  "    scheduler.step()  # once per step taken"]
    elif _uses_scheduler(cfg):
        lines.append("scheduler.step()  # once per optimizer step, never per micro-batch")
    lines.append("optimizer.zero_grad(set_to_none=True)")
    if cfg.clear_cache == "step":
        lines += ["# clear_cache=step: free garbage and cached CUDA memory after every optimizer step.",
                  *_clear_cache()]
    if cfg.max_steps:
        lines += ["step += 1", "if step == max_steps:", "    return model"]
    return lines


def _clear_cache() -> list[str]:
    return ["gc.collect()", 'if device.type == "cuda":', "    torch.cuda.empty_cache()"]

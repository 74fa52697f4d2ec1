"""The pitfall gallery's catalog: each classic accumulation bug's title, what goes wrong and why, the
fix, and the settings that show it best, over BASE_CONFIG. Page text and defaults only: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gaccum_core.config import RunConfig

BASE_CONFIG = RunConfig(model="mlp", dataset="digits", micro_batch_size=8, accum_steps=4, device="cpu")


@dataclass(frozen=True)
class Pitfall:
    """One classic accumulation bug: what goes wrong, why, the fix, and settings that show it best."""

    key: str
    title: str
    explanation: str  # two lines: what goes wrong, and why
    fix: str
    default: dict[str, Any]  # RunConfig fields over BASE_CONFIG (+ train_samples, except #6)
    mistake: str = ""  # the gradient's mistake, a key of lab.mistakes.MISTAKES ('' where it is not one of them)


PITFALLS: dict[str, Pitfall] = {p.key: p for p in (
    Pitfall("step_when_i_mod_k_is_0", "Stepping when i % k == 0",
            "The first step comes after ONE micro-batch, and every later window is shifted: 1, k, k, ... batches.\n"
            "enumerate() counts from 0, so i % k == 0 fires at once: a whole step on b samples, divided by k.",
            "if (i + 1) % k == 0: step", {}),
    Pitfall("zero_grad_before_step", "zero_grad() before step()",
            "The step gets no gradient at all: the weights never move (under a GradScaler, PyTorch raises instead).\n"
            "zero_grad() between the last backward and (scaler.)step() wipes the window's gradients before use.",
            "step first, then optimizer.zero_grad(set_to_none=True)", {}),
    Pitfall("mean_without_dividing_by_k", "Mean loss not divided by k",
            "The gradient is k x the big batch's: in effect a k x larger lr; clipping bites at a k x smaller norm.\n"
            "Each micro-batch mean already averages b samples; k of them added up without / k are k x the mean.",
            "loss = criterion(logits, y) / k", {"lr": 0.005}, "not_divided_by_k"),
    Pitfall("lr_divided_by_k", "lr / k instead of loss / k",
            "Here with Adam: each step comes out ~k x too small, as Adam divides by the gradient's scale, leaving lr / k.\n"
            "With SGD and no weight decay (momentum too: it is linear) lr/k * k*g = lr*g exactly: why it looks safe.",
            "keep the lr, divide the loss: loss = criterion(logits, y) / k", {"optimizer": "adam", "lr": 1e-3}),
    Pitfall("partial_window_divided_by_k", "Partial last window divided by k",
            "An epoch's last window has under k micro-batches, each still divided by k: here 2 of 4, half a step.\n"
            "loss / k is the window mean only for full windows (here digits' first 304 samples: 9 x 32, then 16).",
            "loss = criterion(logits, y, reduction='sum') / samples_in_window", {"train_samples": 304},
            "partial_window_over_full_k"),
    Pitfall("mean_of_means_sequences", "Mean of per-micro-batch means on sequences",
            "Each micro-batch's token mean counts 1/k, so the tokens of a short micro-batch outweigh a long one's.\n"
            "The big batch averages over the window's tokens; here gpt on pydoc, whose documents end in short chunks.",
            "loss = token_loss_sum / tokens_in_window  # the engine's reduction='mean'",
            {"model": "gpt", "dataset": "pydoc", "max_seq_len": 256, "micro_batch_size": 1},
            "micro_batches_weighted_equally"),
    Pitfall("batchnorm_small_micro_batches", "BatchNorm with small micro-batches",
            "BatchNorm normalises each micro-batch by its own statistics: k batches of 2 are not one batch of 2k.\n"
            "No loss weighting fixes that; GroupNorm (cnn_gn, the correct column) normalises each sample alone.",
            "use GroupNorm or LayerNorm, or micro-batches big enough for stable statistics",
            {"model": "cnn_bn", "micro_batch_size": 2, "accum_steps": 8}, "split_dependent"),
    Pitfall("scheduler_per_micro_batch", "LR scheduler stepped per micro-batch",
            "The schedule runs k x too fast: a 20-step warmup is over after 20 / k optimizer steps.\n"
            "LambdaLR counts scheduler.step() calls: k per optimizer step in the micro-batch loop (PyTorch warns).",
            "scheduler.step() right after optimizer.step(), once per window", {"warmup_steps": 20}),
    Pitfall("scaler_update_inside_window", "scaler.update() inside the window",
            "The scale changes mid-window: the window's gradients carry different scales, all unscaled by the last.\n"
            "Its clock ticks per micro-batch, so it grows k x as often, overflows, and whole windows are skipped.",
            "scaler.step(optimizer); scaler.update()  # once per window",
            {"amp": "fp16", "init_scale": 1024.0, "growth_interval": 3}),
)}

# The FSDP traps: 2 gloo processes, fully_shard on each Linear of the mlp (whose root then holds no parameter of
# its own) and on the root; b is each rank's micro-batch, so a window holds b * k * 2 samples. SGD, whose step
# shows a gradient's scale (Adam would divide most of it away).
FSDP_PITFALLS: dict[str, Pitfall] = {p.key: p for p in (
    Pitfall("fsdp_averaged_gradients", "FSDP averages the ranks' gradients",
            "Each rank divides its loss by the window's whole count, then FSDP averages over the N ranks: 1/N of the "
            "big batch's gradient.\n"
            "Like DDP, FSDP's reduce-scatter is a mean over ranks, so nothing undoes the N: in effect an lr / N.",
            "divide each rank's summed loss by window_count / N  # the engine's weighting", {}),
    Pitfall("fsdp_divide_factor_on_root", "set_gradient_divide_factor on the root only",
            "Meant to make FSDP sum instead of average, it changes nothing here: the gradients stay 1/N.\n"
            "The factor is not recursive and this root owns no parameters (its Linear units do); on every unit, "
            "gloo raises.",
            "for unit in units: unit.set_gradient_divide_factor(1.0); on gloo also "
            "unit.set_force_sum_reduction_for_comms(True)", {}),
    Pitfall("fsdp_reshard_off_at_step", "reshard_after_backward off at the step",
            "Each window's first forward computes with the weights from before the step: the run drifts from step 2 "
            "on.\n"
            "The units stay gathered after the last backward, so nothing fetches the optimizer's update; and "
            "model.parameters() then lists those copies, each .grad None.",
            "set_reshard_after_backward(True) before the window's last backward (the engine does), or "
            "unit.reshard() for every unit before the step", {"fsdp_reshard_after_backward": "off"}),
)}
FSDP_SETTINGS = {"nproc": 2, "sharding": "fsdp"}

# The activation-checkpointing traps: one gradient on one batch (mlp on digits, BASE_CONFIG's first window), the
# first block checkpointed as the trap writes it and as the engine does, each against no checkpointing.
CHECKPOINTING_PITFALLS: dict[str, Pitfall] = {p.key: p for p in (
    Pitfall("reentrant_input_without_grad", "Reentrant checkpointing of a block whose input needs no grad",
            "The checkpointed block's parameters get no gradient at all (.grad None), with no error: the rest "
            "trains, it stays as it was.\n"
            "use_reentrant=True makes the block's output require grad only if an input does; the data batch "
            "does not, so the backward stops there (torch only warns).",
            "checkpoint(block, x, use_reentrant=False)  # the engine's; or x.requires_grad_() before the block", {}),
    Pitfall("recompute_new_dropout_masks", "Recomputation that draws new dropout masks",
            "The backward recomputes the block with other dropout masks than the forward used: the gradient is of "
            "a network that never ran.\n"
            "preserve_rng_state=False skips restoring the RNG state before the recompute, which draws on from "
            "wherever the forward left it.",
            "checkpoint(block, x, use_reentrant=False)  # preserve_rng_state=True: the default, and the engine's",
            {}),
)}

# The trap only a GPU can show: shown with torch's message elsewhere (cuda_graphs).
CUDA_PITFALLS: dict[str, Pitfall] = {p.key: p for p in (
    Pitfall("cuda_graphs_across_micro_batches", "torch.compile(mode='reduce-overhead') with k > 1",
            "On a GPU the second micro-batch's backward fails: the .grad the first one left has been overwritten.\n"
            "reduce-overhead and max-autotune record CUDA graphs; each forward starts a new generation, which reuses "
            "the memory of the previous backward's outputs, .grad among them (pytorch #169545).",
            "compile default (or torch's max-autotune-no-cudagraphs) with k > 1; the CUDA-graph modes with k = 1 "
            "only (gaccum refuses the others before Start)", {"compile": "reduce-overhead"}),
)}

# The four post-training reports: a tiny gpt on the bundled pg rollouts (token-mean of -A·log p), plain SGD (no
# momentum), so a gradient's scale is the step's; each report's loop beside the engine's exact one (reports).
REPORT_SETTINGS = {"model": "gpt", "dataset": "pg", "micro_batch_size": 5, "accum_steps": 4, "optimizer": "sgd",
                   "lr": 0.1, "momentum": 0.0, "no_dropout": True}
REPORT_PITFALLS: dict[str, Pitfall] = {p.key: p for p in (
    Pitfall("verl_sample_share", "volcengine/verl #5625: token-budget micro-batches weighted by their sample share",
            "Each micro-batch's token mean is scaled by its share of the window's samples, not of its tokens.\n"
            "With micro-batches cut by a token budget, a few long sequences and many short ones hold as many "
            "tokens: their tokens are weighted unequally.",
            "divide each micro-batch's token-loss sum by the window's token count",
            REPORT_SETTINGS, "weighted_by_sample_share"),
    Pitfall("trl_generation_batch", "huggingface/trl #6024: DAPO's normaliser counts a generation batch of 2 windows",
            "The window's token-loss sum is divided by the tokens of the whole generation batch (2 windows): the "
            "gradient is scaled by window tokens / generation-batch tokens.\n"
            "The normaliser is counted over steps_per_generation micro-steps while the optimizer steps after "
            "gradient_accumulation_steps of them (here half).",
            "count the normaliser over the optimizer's window, not the generation batch",
            REPORT_SETTINGS, "constant_scale"),
    Pitfall("ms_swift_k_twice", "modelscope/ms-swift #10117: DAPO's loss divided by k again",
            "The gradient is exactly 1/k of the intended one: for SGD an lr / k.\n"
            "The loss is already divided by the window's token count; the trainer then divides it by the "
            "accumulation steps as it does a micro-batch mean.",
            "divide the window's token-loss sum by its token count once, not again by k",
            REPORT_SETTINGS, "divided_by_k_twice"),
    Pitfall("mlx_lm_micro_batch_means", "ml-explore/mlx-lm #1413: each micro-batch's own token mean / k",
            "Micro-batches count equally whatever their tokens, and the epoch's last partial window is never "
            "trained.\n"
            "Each micro-batch's loss is its own token mean, divided by k; the loop steps on full windows only.",
            "loss = token_loss_sum / tokens_in_window, and step on the partial last window too",
            REPORT_SETTINGS, "micro_batches_weighted_equally"),
)}

# #7's correct column trains another model (against its own big batch): no loss weighting fixes BatchNorm.
CORRECT_SIDE = {"batchnorm_small_micro_batches": {"model": "cnn_gn"}}


def pitfall(key: str) -> Pitfall:
    """Pitfall `key` of any gallery: the nine in one process, the FSDP traps, the checkpointing ones, CUDA's or
    the four post-training reports."""
    galleries = (PITFALLS, FSDP_PITFALLS, CHECKPOINTING_PITFALLS, CUDA_PITFALLS, REPORT_PITFALLS)
    found = next((gallery[key] for gallery in galleries if key in gallery), None)
    if found is None:
        every = [key for gallery in galleries for key in gallery]
        raise KeyError(f"unknown pitfall {key!r}: one of {', '.join(every)}")
    return found


def case_config(key: str, **overrides: Any) -> RunConfig:
    """The settings pitfall `key` trains with: BASE_CONFIG, the case's own (2 FSDP processes for the FSDP
    traps), then `overrides` (train_samples, not a RunConfig field, left out)."""
    sharded = FSDP_SETTINGS if key in FSDP_PITFALLS else {}
    settings = {**sharded, **pitfall(key).default, **overrides}
    settings.pop("train_samples", None)
    return RunConfig.from_dict({**BASE_CONFIG.to_dict(), **settings})


def setup_words(key: str) -> str:
    """What the case trains, read off its settings: model, data, b, k, optimizer and what else it sets."""
    config, default = case_config(key), pitfall(key).default
    optimizer = f"{config.optimizer} lr {config.lr:g}"
    if config.optimizer == "sgd":
        optimizer += f" momentum {config.momentum:g}"
    model = f"gpt {config.gpt_preset}" if config.model == "gpt" else config.model
    words = [f"{model} on {config.dataset}", f"b={config.micro_batch_size}", f"k={config.accum_steps}",
             optimizer]
    if "train_samples" in default:
        words.append(f"the first {default['train_samples']} training samples")
    if config.is_text:
        words.append(f"sequences of up to {config.max_seq_len} tokens")
    if config.amp != "off":
        words.append(f"{config.amp} (initial scale {config.init_scale:g}, growth every {config.growth_interval} steps)")
    if config.sharding == "fsdp":
        unit = "Linear" if config.model == "mlp" else "block"
        words.append(f"{config.world_size} gloo processes, fully_shard on each {unit} and on the root "
                     f"(b per process: a window of {config.effective_batch_size} samples)")
        if config.fsdp_reshard_after_backward == "off":
            words.append("reshard_after_backward off")
    if config.warmup_steps:
        words.append(f"{config.warmup_steps} warmup steps")
    correct = CORRECT_SIDE.get(key, {})
    if correct:
        words.append("the correct column: " + ", ".join(f"{field} {value}" for field, value in correct.items()))
    return ", ".join(words)


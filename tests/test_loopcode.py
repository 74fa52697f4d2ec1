"""The rendered loop: valid Python with only the lines its config needs, training exactly like the engine."""

import copy
import re

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.engine import Engine
from gaccum_core.loopcode import render_loop
from gaccum_core.metrics import NullSink


class SkipCounter(NullSink):
    """Counts the optimizer steps the GradScaler skipped."""

    skipped = 0

    def log_step(self, row):
        self.skipped += row["skipped"]


# (config fields, substrings the loop must contain, substrings it must not contain)
CASES = [
    (dict(), ["loss.backward()", "optimizer.step()", "torch.optim.SGD(", "momentum=0.9", "/ len(window)",
              'reduction="sum"', "manual_seed(seed * 1_000_003 + epoch)", "zero_grad(set_to_none=True)"],
     ["autocast", "GradScaler", "scaler", "scheduler", "clip_grad_norm_", "empty_cache", "import gc",
      "import math", "torch.compile", "max_steps", "warmup"]),
    (dict(amp="fp16", init_scale=1024.0, growth_interval=50),
     ["GradScaler(device.type, init_scale=1024.0, growth_interval=50)", "dtype=torch.float16",
      "scaler.scale(loss).backward()", "scaler.step(optimizer)", "scaler.update()"],
     ["bfloat16", "unscale_", "clip_grad_norm_", "optimizer.step()", "scheduler", "get_scale"]),
    (dict(amp="bf16", grad_clip=0.5),
     ["dtype=torch.bfloat16", "clip_grad_norm_(model.parameters(), grad_clip)", "grad_clip = 0.5",
      "optimizer.step()"],
     ["GradScaler", "scaler", "torch.float16", "unscale_"]),
    (dict(amp="fp16", grad_clip=1.0, lr_schedule="cosine", warmup_steps=10, clear_cache="step"),
     ["scaler.unscale_(optimizer)", "clip_grad_norm_", "LambdaLR", "math.cos", "warmup_steps = 10",
      "scale = scaler.get_scale()", "if scaler.get_scale() >= scale:", "gc.collect()",
      "torch.cuda.empty_cache()", 'if device.type == "cuda":'],
     ["optimizer.step()", "torch.compile"]),
    (dict(lr_schedule="constant", warmup_steps=5, reduction="sum", optimizer="adam", weight_decay=0.01),
     ["LambdaLR", "torch.optim.Adam(model.parameters(), lr=0.05, weight_decay=0.01)", "scheduler.step()"],
     ["math", "/ len(window)", "momentum", "total_steps", "GradScaler"]),
    (dict(lr_schedule="cosine", max_steps=7, optimizer="adamw", clear_cache="micro", compile="default"),
     ["torch.optim.AdamW(", "max_steps = 7", "min(epochs * steps_per_epoch, max_steps)",
      "if step == max_steps:", "model = torch.compile(model)", "gc.collect()"],
     ["warmup", "mode=", "get_scale"]),
    (dict(compile="max-autotune", seed=2**62),
     ['torch.compile(model, mode="max-autotune")', "% 2**63"], ["empty_cache"]),
]


@pytest.mark.parametrize("fields,present,absent", CASES)
def test_loop_compiles_and_holds_only_the_lines_its_config_needs(fields, present, absent):
    src = render_loop(RunConfig(**fields))
    compile(src, "<loop>", "exec")
    for text in present:
        assert text in src, f"{text!r} missing from:\n{src}"
    for text in absent:
        assert text not in src, f"{text!r} should not be in:\n{src}"
    # clear_cache=step empties the cache once, after zero_grad; micro inside the micro-batch loop.
    if fields.get("clear_cache") == "step":
        assert src.index("empty_cache") > src.index("zero_grad")
    if fields.get("clear_cache") == "micro":
        assert src.index("empty_cache") < src.index("# Window done")


@pytest.mark.parametrize("fields,present,absent", CASES)
def test_loop_is_tidy_python(fields, present, absent):
    src = render_loop(RunConfig(**fields))
    assert src.endswith("\n") and not src.endswith("\n\n")
    for line in src.splitlines():
        assert line == line.rstrip() and "\t" not in line and len(line) <= 110, repr(line)
        assert (len(line) - len(line.lstrip(" "))) % 4 == 0, repr(line)
    assert not re.search(r"\bif (amp|fp16|bf16|compile|clip)\b", src)


def run_both(**fields):
    """Train one digits epoch with the engine and with the rendered loop from the same weights."""
    config = RunConfig(device="cpu", model="mlp", dataset="digits", **fields)
    engine = Engine(config)
    model = copy.deepcopy(engine.model)
    start = copy.deepcopy(model)
    sink = SkipCounter()
    assert engine.run(sink) == "finished"
    namespace = {}
    exec(compile(render_loop(config), "<loop>", "exec"), namespace)
    trained = namespace["train"](model, engine.data.train.batch, len(engine.data.train), torch.device("cpu"))
    assert trained is model
    for got, want in zip(model.parameters(), engine.model.parameters(), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert not all(torch.equal(p, q) for p, q in zip(model.parameters(), start.parameters()))
    return sink


@pytest.mark.parametrize("optimizer,lr", [("sgd", 0.05), ("adam", 1e-3)])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_rendered_loop_trains_exactly_like_the_engine(optimizer, lr, reduction):
    # digits: 1437 training samples = 44 windows of 32 and a partial one of 29 (micro-batches 8, 8, 8, 5).
    if reduction == "sum":
        lr = lr / 32
    run_both(micro_batch_size=8, accum_steps=4, reduction=reduction, optimizer=optimizer, lr=lr, seed=3)


def test_rendered_loop_matches_with_warmup_cosine_weight_decay_and_max_steps_mid_epoch():
    # 23 steps per epoch: max_steps=30 stops 7 steps into the second epoch; the cosine spans 30 steps.
    run_both(micro_batch_size=16, accum_steps=4, optimizer="adamw", lr=3e-3, weight_decay=0.1,
             lr_schedule="cosine", warmup_steps=5, max_steps=30, epochs=2)


def test_rendered_loop_matches_over_two_epochs_with_warmup_and_clipping():
    run_both(micro_batch_size=50, accum_steps=3, warmup_steps=8, grad_clip=0.5, epochs=2)


@pytest.mark.parametrize("clear_cache", ["step", "micro"])
def test_rendered_loop_clearing_the_cache_runs_and_matches(clear_cache):
    # gc.collect() takes ~0.2 s in a process holding torch: keep this run to two steps.
    run_both(micro_batch_size=8, accum_steps=2, max_steps=2, clear_cache=clear_cache)


def test_rendered_fp16_loop_matches_including_skipped_steps_and_the_schedule():
    # A scale of 2**30 overflows fp16 at first: the first steps are skipped and must not advance the schedule.
    sink = run_both(micro_batch_size=8, accum_steps=4, amp="fp16", init_scale=2.0**30, growth_interval=5,
                    grad_clip=1.0, lr_schedule="cosine", warmup_steps=10)
    assert sink.skipped >= 2


def test_a_data_parallel_config_shows_the_one_process_loop_it_equals():
    """N=2, b=8: the loop shown is the one-process loop with micro-batch 16, under a note on DDP and no_sync."""
    from gaccum_core.config import RunConfig
    from gaccum_core.loopcode import render_loop

    code = render_loop(RunConfig(nproc=2, micro_batch_size=8, accum_steps=4))
    assert code.startswith("# Run as N=2 data-parallel processes")
    assert "model.no_sync()" in code and "micro_batch_size = 16" in code
    assert code.split("# The update is exactly that of this one-process loop:\n\n")[1] == render_loop(
        RunConfig(micro_batch_size=16, accum_steps=4))
    assert "no_sync off" in render_loop(RunConfig(nproc=2, sync_every_micro_batch=True))

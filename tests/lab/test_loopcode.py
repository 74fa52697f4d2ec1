"""The rendered loop: valid Python with only the lines its config needs, training exactly like the engine."""

import copy
import os
import re
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gaccum_core.config import RECORD_DATASETS, RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.models.build import build_seeded_model
from gaccum_core.train.engine import Engine
from gaccum_core.train.fsdp import blocks
from gaccum_core.lab.loopcode import render_loop
from gaccum_core.lab.loopcode_records import batch_fields
from gaccum_core.train.metrics import NullSink
from records_data import pg, records, rendered_get_batch, rollouts, sft  # noqa: F401  (fixtures)


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
    # Images, the textbook weighting: each micro-batch's mean over k, flagged as not exact.
    (dict(reduction="mean_per_micro_batch"),
     ["loss = F.cross_entropy(logits.float(), y) / accum_steps", "NOT exact", "different sample",
      "k = accum_steps, in a partial last window too"],
     ["/ len(window)", 'reduction="sum"', "window_tokens", "ignore_index"]),
    # Text, exact mean: token logits flattened, padding ignored, the window's target tokens counted first.
    (dict(model="gpt", dataset="pydoc", amp="bf16", grad_clip=1.0),
     ["(B, T, vocab)", "logits.float().flatten(0, 1), y.flatten()", "window_tokens = sum(int((y != -100).sum())",
      'F.cross_entropy(logits, y, ignore_index=-100, reduction="sum") / window_tokens', "for x, y in batches:",
      "sequence indices", "sequences (of up to 128 tokens) per optimizer step", "gpt (tiny) on pydoc"],
     ["/ len(window)", ") / accum_steps", "NOT exact", "(B, classes)", "default_collate"]),
    # Text, the textbook weighting: each micro-batch's mean over its own tokens, divided by k; not exact.
    (dict(model="gpt", dataset="pydoc", reduction="mean_per_micro_batch", amp="fp16"),
     ["F.cross_entropy(logits, y, ignore_index=-100) / accum_steps", "NOT exact", "different token",
      "scaler.scale(loss).backward()"],
     ["window_tokens", 'reduction="sum"', "/ len(window)"]),
    (dict(model="gpt", dataset="pydoc", reduction="sum", max_seq_len=64),
     ['F.cross_entropy(logits, y, ignore_index=-100, reduction="sum")', "every token adds", "up to 64 tokens"],
     ["window_tokens", ") / accum_steps", "/ len(window)"]),
    # FSDP2, the defaults: every process's loop, sharded per block then at the root, its loss times N.
    (dict(nproc=2, sharding="fsdp"),
     ["def train(model, blocks, get_batch, num_samples, device):", "fully_shard(block)", "fully_shard(model)",
      "from torch.distributed.fsdp import fully_shard", "rank = dist.get_rank()", "world_size = 2",
      "loss = loss_sum * world_size / len(window)", "N=2 x b=32 x k=4 = 256", "fsdp_sync=every",
      "share[rank * micro_batch_size:(rank + 1) * micro_batch_size]"],
     ["set_requires_gradient_sync", "set_reshard_after_backward", "MixedPrecisionPolicy", "no_sync",
      "DistributedDataParallel", "micro_batch_size = 64", "last = "]),
    # fsdp_sync last and reshard off: both switched per micro-batch, on for the window's last only.
    (dict(nproc=2, sharding="fsdp", fsdp_sync="last", fsdp_reshard_after_backward="off", amp="bf16", grad_clip=1.0),
     ["model.set_requires_gradient_sync(last)", "model.set_reshard_after_backward(last)", "fsdp_sync=last",
      "MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)",
      "fully_shard(block, mp_policy=policy)", "fully_shard(model, mp_policy=policy)",
      "clip_grad_norm_(model.parameters(), grad_clip)", "last = micro_start + global_micro_batch >= len(window)"],
     ["GradScaler", "torch.float16"]),
    (dict(nproc=2, sharding="fsdp", fsdp_reshard_after_backward="off", amp="fp16", reduction="sum"),
     ["model.set_reshard_after_backward(last)", "param_dtype=torch.float16", "scaler.scale(loss).backward()",
      "loss = loss_sum * world_size  #"],
     ["set_requires_gradient_sync", "/ len(window)"]),
    # Text under FSDP: the window's target tokens are every process's, counted before its first backward.
    (dict(model="gpt", dataset="pydoc", nproc=2, sharding="fsdp"),
     ["window_tokens = sum(int((get_batch(window[s:s + micro_batch_size])[1] != -100).sum())",
      "loss = loss_sum * world_size / window_tokens", "ignore_index=-100"],
     ["for x, y in batches:", "divisor"]),
    (dict(model="gpt", dataset="pydoc", nproc=2, sharding="fsdp", reduction="mean_per_micro_batch"),
     ["divisor = int((get_batch(share)[1] != -100).sum()) * accum_steps", "loss = loss_sum * world_size / divisor",
      "NOT exact"],
     ["window_tokens"]),
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
    # A text mean's divisor is known before the window's first backward pass.
    if "window_tokens" in src:
        loop = "for x, y in batches:" if "in batches:" in src else "for micro_start in"  # one process, or FSDP's each
        assert src.index("window_tokens = ") < src.index(loop) < src.index(".backward()")


@pytest.mark.parametrize("fields,present,absent", CASES)
def test_loop_is_tidy_python(fields, present, absent):
    src = render_loop(RunConfig(**fields))
    assert src.endswith("\n") and not src.endswith("\n\n")
    for line in src.splitlines():
        assert line == line.rstrip() and "\t" not in line and len(line) <= 110, repr(line)
        assert (len(line) - len(line.lstrip(" "))) % 4 == 0, repr(line)
    assert not re.search(r"\bif (amp|fp16|bf16|compile|clip)\b", src)


def run_both(**fields):
    """Train one digits epoch (or the given model and data) with the engine and with the rendered loop
    from the same weights."""
    config = RunConfig(**{"device": "cpu", "model": "mlp", "dataset": "digits", **fields})
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


def test_rendered_textbook_loop_matches_the_engine_with_a_partial_last_window():
    # digits with b=50, k=3: 9 windows of 150, then 87 samples in 2 micro-batches (50, 37), each of whose
    # mean losses is still divided by 3, as the tutorials do (and the engine).
    run_both(micro_batch_size=50, accum_steps=3, reduction="mean_per_micro_batch", lr=0.1)


# The textbook weighting renders as mean / k where the engine divides the sum by (count * k): equal up to
# rounding, which Adam's division by tiny second moments would blow past 1e-5, so that case takes SGD.
@pytest.mark.parametrize("reduction,optimizer,lr", [("mean", "adamw", 3e-3), ("sum", "adamw", 1e-5),
                                                    ("mean_per_micro_batch", "sgd", 0.1)])
def test_rendered_text_loop_trains_exactly_like_the_engine(reduction, optimizer, lr, tmp_path):
    # Paragraphs of 4 to 69 bytes cut into sequences of up to 32 tokens: nearly every micro-batch holds a
    # different token count and padding. One epoch of 84 sequences: 4 windows of 20, then a partial one of 4.
    text = tmp_path / "paragraphs.txt"
    text.write_text("\n\n".join("word " * (1 + i * 7 % 14) for i in range(60)), encoding="utf-8")
    run_both(model="gpt", dataset="text", text_file=str(text), max_seq_len=32, micro_batch_size=4, accum_steps=5,
             reduction=reduction, optimizer=optimizer, lr=lr, grad_clip=1.0, seed=1)


def test_rendered_text_loop_trains_exactly_like_the_engine_on_pydoc():
    run_both(model="gpt", dataset="pydoc", max_seq_len=64, micro_batch_size=4, accum_steps=2, max_steps=3)


def test_the_text_loop_counts_the_window_tokens_the_engine_divides_by():
    """The rendered count, (y != -100).sum() over the window's batches, is the engine's target_tokens."""
    config = RunConfig(model="gpt", dataset="pydoc", max_seq_len=32, micro_batch_size=4, accum_steps=3)
    engine = Engine(config)
    short = torch.nonzero(engine.data.train.targets < 31).flatten()[:2]  # documents' last, shorter chunks
    window = torch.cat([short, torch.arange(7, 17)])
    batches = [engine.data.train.batch(window[s:s + 4]) for s in range(0, len(window), 4)]
    counted = sum(int((y != -100).sum()) for _, y in batches)
    assert counted == engine.data.train.target_tokens(window)
    assert counted < sum(y.numel() for _, y in batches)  # padding present: counting y.numel() would be wrong


def test_a_data_parallel_config_shows_the_one_process_loop_it_equals():
    """N=2, b=8: the loop shown is the one-process loop with micro-batch 16, under a note on DDP and no_sync."""
    code = render_loop(RunConfig(nproc=2, micro_batch_size=8, accum_steps=4))
    assert code.startswith("# Run as N=2 data-parallel processes")
    assert "model.no_sync()" in code and "micro_batch_size = 16" in code
    assert code.split("# The update is exactly that of this one-process loop:\n\n")[1] == render_loop(
        RunConfig(micro_batch_size=16, accum_steps=4))
    assert "no_sync off" in render_loop(RunConfig(nproc=2, sync_every_micro_batch=True))


@pytest.mark.parametrize("fields,divisor", [
    (dict(), "(window samples / N)"), (dict(reduction="sum"), "by 1/N"),
    (dict(reduction="mean_per_micro_batch"), "(micro-batch samples * k / N)"),
    (dict(model="gpt", dataset="pydoc"), "(window target tokens / N)"),
    (dict(model="gpt", dataset="pydoc", reduction="mean_per_micro_batch"), "(micro-batch target tokens * k / N)"),
])
def test_the_data_parallel_note_names_each_reductions_divisor(fields, divisor):
    code = render_loop(RunConfig(nproc=2, **fields))
    compile(code, "<loop>", "exec")
    assert divisor in " ".join(line.lstrip("# ") for line in code.splitlines()[:4])


def _train_rendered_fsdp_loops(rank: int, configs_json: dict[str, str], init_file: str, out: str) -> None:
    """One of two gloo processes: each config's rendered FSDP loop on its seeded model, one after another;
    rank 0 saves each config's whole weights."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        weights = {}
        for case, config_json in configs_json.items():
            config = RunConfig.from_json(config_json)
            data = load_data(config)
            model = build_seeded_model(config, data.input_shape, data.num_classes)
            namespace = {}
            exec(compile(render_loop(config), "<loop>", "exec"), namespace)
            get_batch = (rendered_get_batch(data.train, batch_fields(config)) if config.dataset in RECORD_DATASETS
                         else data.train.batch)
            groups = [torch.tensor(data.train.sequence_groups)] if config.dataset == "pg" else []
            trained = namespace["train"](model, blocks(model), get_batch, len(data.train), *groups, torch.device("cpu"))
            weights[case] = {name: p.full_tensor().detach().clone() for name, p in trained.named_parameters()}
        if rank == 0:
            torch.save(weights, out)
    finally:
        dist.destroy_process_group()
    # Done and saved: skip the interpreter's teardown, where gloo's threads sometimes abort the process
    # ("terminate called without an active exception", SIGABRT; the run worker skips it too).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# 118 fake samples in windows of 2*4*4 = 32: three full ones, then 22 (global micro-batches 8, 8, 6: rank 1
# takes 2 of the last). 100 samples: the last window is one micro-batch of 4, all rank 0's; rank 1 has none.
FSDP_LOOPS = {
    "every, reshard on": dict(fake_samples=118),
    "last, reshard off, clipped, empty share": dict(fake_samples=100, fsdp_sync="last",
                                                    fsdp_reshard_after_backward="off", grad_clip=0.5),
}
# The records tasks (records_data): pg's 20 training records at b=3, k=2 are windows of 12 and 8 (global
# micro-batches 6, then 2: rank 1's share of the last is empty); sft's 19 packed into rows at b=2, k=2.
RECORD_LOOPS = {
    "pg seq-mean-token-mean, empty share": dict(loss_agg="seq-mean-token-mean", micro_batch_size=3, accum_steps=2),
    "sft seq-mean-token-sum-norm packed, textbook, last": dict(
        loss_agg="seq-mean-token-sum-norm", packing="on", reduction="mean_per_micro_batch", micro_batch_size=2,
        accum_steps=2, fsdp_sync="last"),
}


def _one_process(config: RunConfig) -> dict[str, torch.Tensor]:
    """The engine's parameters after training config in this process."""
    engine = Engine(config)
    assert engine.run(NullSink()) == "finished"
    return {name: p.detach().clone() for name, p in engine.model.named_parameters()}


def _fsdp_loop_config(case: str, text_files: dict[str, str]) -> RunConfig:
    """Each case's config; the records cases read text_files (sft, pg: records_data's fixtures)."""
    if case in RECORD_LOOPS:
        dataset = case.split()[0]
        return {"sft": sft, "pg": pg}[dataset](text_files[dataset], nproc=2, epochs=1, sharding="fsdp",
                                               **RECORD_LOOPS[case])
    return RunConfig(model="mlp", dataset="fake", image_size=8, fake_classes=10, micro_batch_size=4, accum_steps=4,
                     nproc=2, epochs=1, device="cpu", lr=0.05, sharding="fsdp", **FSDP_LOOPS[case])


@pytest.fixture(scope="module")
def text_files(records, rollouts) -> dict[str, str]:  # noqa: F811  (records_data's fixtures)
    return {"sft": records, "pg": rollouts}


@pytest.fixture(scope="module")
def fsdp_loop_weights(tmp_path_factory, text_files) -> dict[str, dict[str, torch.Tensor]]:
    """Every FSDP_LOOPS and RECORD_LOOPS case trained by one pair of gloo processes (spawning a pair costs seconds of
    imports)."""
    folder = tmp_path_factory.mktemp("fsdp_loops")
    configs_json = {case: _fsdp_loop_config(case, text_files).to_json() for case in [*FSDP_LOOPS, *RECORD_LOOPS]}
    mp.spawn(_train_rendered_fsdp_loops, args=(configs_json, str(folder / "init"), str(folder / "weights.pt")),
             nprocs=2)
    return torch.load(folder / "weights.pt")


@pytest.mark.multiprocess
@pytest.mark.parametrize("case", [*FSDP_LOOPS, *RECORD_LOOPS])
def test_the_rendered_fsdp_loop_run_by_two_processes_trains_like_one_process(case, fsdp_loop_weights, text_files):
    """Two gloo processes running the loop shown for sharding fsdp end with the parameters of one process
    trained on micro-batches of N*b, and of one batch per window (the oracle; not for the textbook's reduction,
    which differs from it by design). The records cases weigh each loss token over every process's records."""
    config = _fsdp_loop_config(case, text_files)
    trained = fsdp_loop_weights[case]
    single = config.replace(nproc=1, sharding="ddp", fsdp_sync="every", fsdp_reshard_after_backward="on",
                            micro_batch_size=2 * config.micro_batch_size)
    data = load_data(config)
    start = dict(build_seeded_model(config, data.input_shape, data.num_classes).named_parameters())
    assert max((trained[k] - start[k]).abs().max().item() for k in start) > 1e-3  # it trained
    one_batch = single.replace(micro_batch_size=config.effective_batch_size, accum_steps=1)
    for reference in (single, *([one_batch] if config.reduction == "mean" else [])):
        for key, want in _one_process(reference).items():
            torch.testing.assert_close(trained[key], want, atol=1e-5, rtol=1e-5,
                                       msg=lambda m, key=key, b=reference.micro_batch_size: f"{key}, b={b}: {m}")

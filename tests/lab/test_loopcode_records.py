"""The rendered loop of the records tasks (sft, pg): loss tokens weighed over the window, pg's advantages and grouped
order, training exactly like the engine."""

import copy

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.lab.loopcode import render_loop
from gaccum_core.lab.loopcode_records import batch_fields
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import NullSink
from records_data import pg, records, rendered_get_batch, rollouts, sft  # noqa: F401  (fixtures)


def run_both(config: RunConfig) -> float:
    """Train config with the engine and with its rendered loop from the same weights: the largest |Δθ|."""
    engine = Engine(config)
    model, start = copy.deepcopy(engine.model), copy.deepcopy(engine.model)
    assert engine.run(NullSink()) == "finished"
    namespace = {}
    exec(compile(render_loop(config), "<loop>", "exec"), namespace)
    train = engine.data.train
    args = [model, rendered_get_batch(train, batch_fields(config)), len(train)]
    if config.dataset == "pg":
        args.append(torch.tensor(train.sequence_groups))
    assert namespace["train"](*args, torch.device("cpu")) is model
    moved = max((p - q).abs().max().item() for p, q in zip(engine.model.parameters(), start.parameters()))
    assert moved > 1e-4  # it trained
    return max((p - q).abs().max().item() for p, q in zip(model.parameters(), engine.model.parameters(), strict=True))


# b=3, k=2: sft's 19 training records are 3 windows and a partial one of 1; pg's 20, 3 and a partial one of 2.
@pytest.mark.parametrize("fields", [dict(loss_agg="seq-mean-token-mean"),
                                    dict(loss_agg="seq-mean-token-sum-norm", packing="on", micro_batch_size=2)])
def test_rendered_sft_loop_trains_exactly_like_the_engine(fields, records):
    config = sft(records, **{"micro_batch_size": 3, "accum_steps": 2, "max_seq_len": 32, "seed": 1, **fields})
    assert run_both(config) <= 1e-6


@pytest.mark.parametrize("fields", [dict(), dict(loss_agg="token-mean"),
                                    dict(loss_agg="token-mean", reduction="mean_per_micro_batch")])
def test_rendered_pg_loop_trains_exactly_like_the_engine(fields, rollouts):
    config = pg(rollouts, **{"micro_batch_size": 3, "accum_steps": 2, "max_seq_len": 32, "seed": 2, **fields})
    assert run_both(config) <= 1e-6


RECORD_CASES = [
    (dict(dataset="sft"), ["(x, y) for", "-100 elsewhere (prompt", "/ window_tokens"],
     ["record:", "advantage", "loss_tokens", "groups"]),
    (dict(dataset="sft", loss_agg="seq-mean-token-sum", reduction="mean_per_micro_batch"),
     ["(x, y, record) for", "tokens = loss_tokens(record)", "token_loss.sum() / units / accum_steps"],
     ["advantage", "groups", "batches = ", "norm_c"]),
    (dict(dataset="sft", loss_agg="seq-mean-token-sum-norm", loss_agg_norm=50),
     ["norm_c = 50", "token_loss.sum() / (units * norm_c)", "batches = [get_batch("],
     ["advantage", "longest completion", "accum_steps\n"]),
    (dict(dataset="pg"), ["def train(model, get_batch, num_samples, groups, device):", "advantage.flatten() * token_loss",
                          "(x, y, advantage) for", "groups.unique()", "token_loss.sum() / tokens"],
     ["record:", "loss_tokens", "randperm(num_samples"]),
    (dict(dataset="pg", reduction="sum"), ["loss = token_loss.sum()\n"],
     ["units", "tokens ="]),
    # Two data-parallel processes: the one-process loop they equal, with pg's grouped order and weights.
    (dict(dataset="pg", nproc=2, loss_agg="group-mean-token-mean"),
     ["# Run as N=2 data-parallel", "groups.unique()", "1 / (units * tokens[group.clamp(min=0)])"], ["record:"]),
    # FSDP2: each process's share weighed from every process's records (executed in test_loopcode's FSDP job).
    (dict(dataset="pg", nproc=2, sharding="fsdp", loss_agg="seq-mean-token-mean"),
     ["def train(model, blocks, get_batch, num_samples, groups, device):", "counted over every process's records",
      "mine = share[rank * micro_batch_size:", "x, y, record, advantage = get_batch(mine)", "loss = loss * world_size",
      "batches = [get_batch(window[s:s + micro_batch_size]) for s in starts]"],
     ["window_tokens", "a mean divides by", "batches = [get_batch(share)]"]),
    (dict(dataset="sft", nproc=2, sharding="fsdp", loss_agg="seq-mean-token-sum", reduction="mean_per_micro_batch"),
     ["batches = [get_batch(share)]", "token_loss.sum() / units / accum_steps", "loss = loss * world_size"],
     ["advantage", "counted within", "divisor = "]),
]


@pytest.mark.parametrize("fields,present,absent", RECORD_CASES)
def test_records_loop_compiles_tidy_with_only_the_lines_its_config_needs(fields, present, absent):
    src = render_loop(RunConfig(model="gpt", **fields))
    compile(src, "<loop>", "exec")
    for text in present:
        assert text in src, f"{text!r} missing from:\n{src}"
    for text in absent:
        assert text not in src, f"{text!r} should not be in:\n{src}"
    assert src.endswith("\n") and not src.endswith("\n\n")
    for line in src.splitlines():
        assert line == line.rstrip() and len(line) <= 110 and (len(line) - len(line.lstrip(" "))) % 4 == 0, repr(line)

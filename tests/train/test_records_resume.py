"""sft and pg stopped mid-window and resumed equal the uninterrupted run bit for bit (issue 43), in this process on a
tiny gpt. seq-mean-token-sum-norm's C (loss_agg_norm 0: the longest completion after truncation) is recorded in the
checkpoint and in the run's status.json (the Runs page's settings table says it), and a resume reads it back instead
of computing it again."""

from __future__ import annotations

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.data.record_sequences import PaddedRecords
from gaccum_core.data.sequences import IGNORE
from gaccum_core.execution.runner import Runner
from gaccum_core.runs.catalog import settings_table
from gaccum_core.runs.run_data import read_runs
from gaccum_core.states import RunState
from gaccum_core.train import engine
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper
from records_data import pg, records, rollouts, sft  # noqa: F401  (the records and rollouts fixtures)

STOP_AFTER = 7  # micro-batches (StopCheck is asked once per micro-batch): the third window's first, with k=3


@pytest.fixture(autouse=True)
def no_sample(monkeypatch):
    monkeypatch.setattr(engine, "sample_text", lambda *args: "")  # the last evaluation's greedy sample: seconds


@pytest.fixture
def configs(records, rollouts, token_cache_dir) -> dict[str, RunConfig]:
    """sft by seq-mean-token-sum-norm (C computed) and pg by group-mean-token-mean, AdamW, k=3: 4 windows each."""
    common = dict(micro_batch_size=2, accum_steps=3, optimizer="adamw", lr=1e-3)
    return {"sft": sft(records, loss_agg="seq-mean-token-sum-norm", **common), "pg": pg(rollouts, **common)}


def _stopped(config: RunConfig) -> tuple[dict, RowKeeper]:
    """The run stopped mid-window: its last checkpoint and the rows it logged."""
    stopped, saved, calls, rows = Engine(config), [], [], RowKeeper()
    state = stopped.run(rows, should_stop=lambda: calls.append(1) or len(calls) > STOP_AFTER,
                        on_checkpoint=saved.append)
    assert state == RunState.STOPPED and saved[-1]["position"]["micro"] > 0
    return saved[-1], rows


def _same(a: Engine, b: Engine) -> None:
    for (name, x), y in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(x, y), name


@pytest.mark.parametrize("task", ["sft", "pg"])
def test_a_records_run_stopped_mid_window_and_resumed_equals_the_uninterrupted_run(configs, task):
    config = configs[task]
    uninterrupted, whole = Engine(config), RowKeeper()
    uninterrupted.run(whole)
    saved, before = _stopped(config)
    resumed, after = Engine(config), RowKeeper()
    resumed.resume_from(saved)
    assert resumed.run(after) == RunState.FINISHED
    _same(uninterrupted, resumed)
    assert [r["loss"] for r in before.steps + after.steps] == [r["loss"] for r in whole.steps]
    assert [r["tokens_seen"] for r in before.steps + after.steps] == [r["tokens_seen"] for r in whole.steps]


def _longest_completion(config: RunConfig) -> int:
    """The most loss targets a training record keeps (padded: a record a row), counted from its batch's targets."""
    train = Engine(config).data.train
    _, y = train.batch(torch.arange(len(train)))
    return int((y != IGNORE).sum(dim=1).max())


def test_the_constant_c_is_recorded_and_a_resume_reads_it_back(configs, monkeypatch):
    config = configs["sft"]
    longest = _longest_completion(config)
    uninterrupted = Engine(config)
    uninterrupted.run(RowKeeper())
    saved, _ = _stopped(config)
    assert saved["loss_agg_norm"] == longest > 1
    # The same records, but C computed otherwise now (a later gaccum, say): the resumed run keeps the C it trained with.
    monkeypatch.setattr(PaddedRecords, "longest_completion", property(lambda self: 1))
    resumed = Engine(config)
    resumed.resume_from(saved)
    assert resumed.norm_c == longest
    resumed.run(RowKeeper())
    _same(uninterrupted, resumed)


def test_a_runs_status_records_the_constant_c_it_used(configs, tmp_path):
    config = configs["sft"].replace(max_steps=1, device="cpu")
    runner = Runner(tmp_path, executor="thread")
    run_id = runner.submit(config)
    assert runner.wait(run_id, timeout=120).state == RunState.FINISHED
    longest = _longest_completion(config)
    assert runner.store.read_status(run_id)["loss_agg_norm"] == longest
    found, _ = read_runs(runner.store, [run_id])  # what the Runs page reads, and its settings table says
    table, _ = settings_table({run_id: config}, constants={run_id: found[run_id].norm_c})
    assert table.loc["loss_agg_norm", run_id] == f"0 (C = {longest}, the longest completion in the training split)"
    token_mean = runner.submit(config.replace(loss_agg="token-mean"))  # a mode without C records none
    assert runner.wait(token_mean, timeout=120).state == RunState.FINISHED
    assert "loss_agg_norm" not in runner.store.read_status(token_mean)

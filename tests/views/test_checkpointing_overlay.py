"""Runs overlaid with and without activation checkpointing (issue 32): each label names the lever, the memory chart
shows checkpointing's saving beside accumulation's, and the throughput chart its recompute cost — on three real
gpt runs of the same effective batch: b=16 k=1, b=4 k=4 (accumulation), b=16 k=1 with full checkpointing."""

import pandas as pd
import pytest

from gaccum_core.config import RunConfig
from gaccum_core.runs.labels import run_labels
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import EVAL_COLUMNS, RowKeeper
from gaccum_core.views.charts import throughput_figure
from gaccum_core.views.memory_chart import memory_figure
from gaccum_core.views.series import RunSeries

BASE = RunConfig(model="gpt", dataset="pydoc", max_seq_len=64, device="cpu", eval_every=10**9, checkpoint_every=0)


@pytest.fixture(scope="module")
def overlaid():
    configs = [BASE.replace(micro_batch_size=16, accum_steps=1), BASE.replace(micro_batch_size=4, accum_steps=4),
               BASE.replace(micro_batch_size=16, accum_steps=1, activation_checkpointing="full")]
    runs = []
    for i, (config, label) in enumerate(zip(configs, run_labels(configs))):
        rows = RowKeeper()
        Engine(config).run(rows, steps=4, evaluate=False)
        runs.append(RunSeries(f"r{i}", label, pd.DataFrame(rows.steps), pd.DataFrame(columns=EVAL_COLUMNS)))
    return runs


def test_labels_name_the_lever_only_where_it_is_on(overlaid):
    assert [run.label for run in overlaid] == ["gpt-tiny b=16 k=1", "gpt-tiny b=4 k=4", "gpt-tiny b=16 k=1 ckpt/full"]
    selective = BASE.replace(activation_checkpointing="selective", ac_every=3)
    assert run_labels([BASE, selective])[1].endswith("ckpt/selective/3")


def test_the_memory_chart_shows_both_savings_and_the_throughput_chart_the_recompute(overlaid):
    memory = {t.name: max(t.y) for t in memory_figure(overlaid, "step").data if t.name in {r.label for r in overlaid}}
    plain, accumulated, checkpointed = (memory[run.label] for run in overlaid)
    assert accumulated < plain and checkpointed < plain  # each lever saves training memory at b·k = 16
    speed = {t.name: t.y for t in throughput_figure(overlaid, "step").data if t.name in {r.label for r in overlaid}}
    assert set(speed) == {run.label for run in overlaid}  # each run's samples/s drawn: the recompute's cost shows
    assert all(len(y) and min(y) > 0 for y in speed.values())

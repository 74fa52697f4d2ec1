"""Evaluation reads a fixed sample of the test split (RunConfig.eval_batches), the same every time, and
eval.csv says how much it covered; the whole split gives the numbers a whole-split evaluation always gave."""

import math

import pytest
import torch
import torch.nn.functional as F

from gaccum_core.config import RunConfig
from gaccum_core.data.text import IGNORE
from gaccum_core.runs.catalog import describe_run
from gaccum_core.runs.files import EVALS_FILE, CsvAppender, RunWriter
from gaccum_core.runs.store import RunStore
from gaccum_core.train.engine import Engine
from gaccum_core.train.evaluation import eval_indices, evaluate


class Counting:
    """A test source that records the indices of every batch() asked of it."""

    def __init__(self, source):
        self.source, self.asked = source, []

    def __len__(self):
        return len(self.source)

    def batch(self, indices):
        self.asked.append(indices.tolist())
        return self.source.batch(indices)


@pytest.fixture(scope="module")
def mlp():
    """An engine holding an untrained mlp and digits (360 test images)."""
    return Engine(RunConfig(model="mlp", device="cpu", seed=3))


def run_eval(engine, test, batch_size, eval_batches):
    return evaluate(engine.model, test, batch_size, engine.precision, engine.device, eval_batches)


@torch.no_grad()
def whole_split(engine, test, batch_size):
    """The evaluation as it was before eval_batches: every batch of the split, in order."""
    loss_sum, correct, count = torch.zeros(()), torch.zeros((), dtype=torch.long), torch.zeros((), dtype=torch.long)
    engine.model.eval()
    for begin in range(0, len(test), batch_size):
        x, y = test.batch(torch.arange(begin, min(begin + batch_size, len(test))))
        logits = engine.model(x).float().flatten(0, -2)
        y = y.flatten()
        loss_sum += F.cross_entropy(logits, y, ignore_index=IGNORE, reduction="sum")
        correct += ((logits.argmax(dim=1) == y) & (y != IGNORE)).sum()
        count += (y != IGNORE).sum()
    engine.model.train()
    return loss_sum.item() / count.item(), correct.item() / count.item()


def test_two_eval_batches_read_two_batches_the_same_every_time_spread_over_the_split(mlp):
    test = Counting(mlp.data.test)
    first, second = run_eval(mlp, test, 32, 2), run_eval(mlp, test, 32, 2)
    assert len(test.asked) == 4 and test.asked[:2] == test.asked[2:]  # two batches per evaluation, the same ones
    assert [len(batch) for batch in test.asked[:2]] == [32, 32] and first == second
    chosen = sum(test.asked[:2], [])
    assert chosen == [i * 360 // 64 for i in range(64)]  # every 5.625th image: 0 to 354, over all of the split
    assert first.samples == first.targets == 64


@pytest.mark.parametrize("eval_batches", [0, 12, 1000])  # 0, exactly the split (360 = 11 batches of 32 + 8), more
def test_the_whole_split_gives_the_numbers_of_a_whole_split_evaluation_exactly(mlp, eval_batches):
    test = Counting(mlp.data.test)
    result = run_eval(mlp, test, 32, eval_batches)
    assert (result.loss, result.accuracy) == whole_split(mlp, mlp.data.test, 32)
    assert test.asked == [list(range(b, min(b + 32, 360))) for b in range(0, 360, 32)]
    assert result.samples == result.targets == 360


def test_indices_are_evenly_spaced_distinct_and_whole_when_the_split_is_smaller():
    assert eval_indices(10, 2, 2).tolist() == [0, 2, 5, 7]
    assert eval_indices(10, 4, 3).tolist() == list(range(10)) == eval_indices(10, 4, 0).tolist()
    assert eval_indices(0, 4, 3).tolist() == []
    spread = eval_indices(100_003, 7, 5)
    assert len(spread) == 35 and len(set(spread.tolist())) == 35 and spread.max() < 100_003


def test_a_language_evaluation_counts_the_target_tokens_it_read():
    engine = Engine(RunConfig(model="gpt", dataset="pydoc", max_seq_len=64, device="cpu", eval_every=10**9))
    test = engine.data.test
    result = evaluate(engine.model, test, 4, engine.precision, engine.device, 3)
    assert result.samples == 12 and result.targets == test.target_tokens(eval_indices(len(test), 4, 3)) > 0


def test_a_short_run_writes_what_each_evaluation_covered(tmp_path):
    store = RunStore(tmp_path)
    config = RunConfig(model="mlp", device="cpu", micro_batch_size=8, accum_steps=2, max_steps=4, eval_every=2,
                       eval_batches=3, checkpoint_every=0)
    run_id = store.create(config)
    writer = RunWriter(store.path(run_id))
    Engine(config).run(writer)
    writer.close()
    evals = store.read_evals(run_id)
    assert evals["step"].tolist() == [2, 4] and evals["eval_samples"].tolist() == [24, 24]
    assert evals["eval_tokens"].isna().all()  # an image run: images, no tokens
    assert [row["eval_samples"] for row in store.eval_rows(run_id)] == [24, 24]


OLD_HEADER = "epoch,step,test_loss,test_accuracy,wall_time_s,perplexity\n"


def test_an_eval_csv_written_before_the_coverage_columns_still_reads(tmp_path):
    store = RunStore(tmp_path)
    run_id = store.create(RunConfig(model="mlp", device="cpu"))
    (store.path(run_id) / EVALS_FILE).write_text(OLD_HEADER + "0,5,1.5,0.5,0.2,\n", encoding="utf-8")
    evals = store.read_evals(run_id)
    assert evals["test_accuracy"].tolist() == [0.5] and math.isnan(evals["eval_samples"].iloc[0])
    assert describe_run(store, run_id)["state"] != "damaged"
    assert "eval_samples" not in store.eval_rows(run_id)[0]
    appender = CsvAppender(store.path(run_id) / EVALS_FILE, ("epoch", "step", "eval_samples"))
    appender.append({"epoch": 0, "step": 10, "test_loss": 1.0, "test_accuracy": 0.6, "eval_samples": 64})
    appender.close()  # a resumed old run keeps its header: the new column is left out, the file still reads
    assert store.read_evals(run_id)["step"].tolist() == [5, 10]

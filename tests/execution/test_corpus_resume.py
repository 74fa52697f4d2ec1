"""Stop and resume on a cached corpus: a gpt run on a .jsonl corpus read from its token cache, padded and packed,
stopped mid-epoch (mid-window, at a partial last window, across the epoch boundary) and resumed, equals the
uninterrupted run bit for bit and reads the very same windows. The interrupted run tokenises the corpus into a
cache of its own in its first segment; its later segments read that cache without tokenising again.
The stop-and-resume rules themselves (images, fp16, a killed worker): test_resume.py.
"""

from __future__ import annotations

import json

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.data.sequences import PackedSequences, PaddedSequences
from gaccum_core.execution.resume import run_checkpoints
from gaccum_core.execution.runner import Runner
from gaccum_core.states import RunState
from gaccum_core.train.accumulation import windows_per_epoch

WAIT_S = 300  # only so a broken run fails instead of hanging
WORDS = "gradient window token cache resume epoch shard packed padded exact".split()
# 40 notes of 3 to 25 words: padded, 126 train sequences of 3 to 32 target tokens (16 windows of b*k = 8 an epoch,
# the last of 6); packed, 116 full sequences (15 windows, the last of 4).
TEXTS = [f"Note {i}: " + " ".join(WORDS[(3 * i + j * j) % len(WORDS)] for j in range(2 + (7 * i) % 23)) for i in range(40)]
PACKINGS = ("off", "on")


class Reads:
    """The sample indices of every batch read from a sequences object (the thread executor trains in this process)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows: list[tuple[int, tuple[int, ...]]] = []
        for kind in (PaddedSequences, PackedSequences):
            monkeypatch.setattr(kind, "batch", self._recording(kind.batch))

    def _recording(self, real):
        def batch(sequences, indices):
            self.rows.append((len(sequences), tuple(torch.as_tensor(indices).tolist())))
            return real(sequences, indices)
        return batch

    def taken(self, num_train: int) -> list[tuple[int, ...]]:
        """The training micro-batches read so far (evaluation reads the smaller validation split), and forget them."""
        taken = [indices for length, indices in self.rows if length == num_train]
        self.rows.clear()
        return taken


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "notes.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS), encoding="utf-8")
    return path


def _config(corpus, packing: str, cache_dir) -> RunConfig:
    return RunConfig(model="gpt", dataset="text", text_file=str(corpus), cache_dir=str(cache_dir), packing=packing,
                     max_seq_len=32, micro_batch_size=2, accum_steps=4, epochs=2, eval_every=5, device="cpu",
                     optimizer="adamw", lr=1e-3, lr_schedule="cosine", warmup_steps=3)


def _ended(runner: Runner, run_id: str):
    snapshot = runner.wait(run_id, timeout=WAIT_S)
    assert snapshot.done, f"run {run_id} never ended"
    return snapshot


@pytest.fixture(scope="module")
def references(corpus, tmp_path_factory):
    """Per packing: the uninterrupted run's store and id, its training reads, and its number of training sequences."""
    runner, cache, done = Runner(tmp_path_factory.mktemp("reference")), tmp_path_factory.mktemp("cache"), {}
    with pytest.MonkeyPatch.context() as patch:
        reads = Reads(patch)
        for packing in PACKINGS:
            config = _config(corpus, packing, cache)
            num_train = len(load_data(config).train)
            reads.taken(num_train)
            run_id = runner.submit(config)
            assert _ended(runner, run_id).state == RunState.FINISHED
            done[packing] = run_id, reads.taken(num_train), num_train
    return runner.store, done


def _assert_same_run(store, reference: str, resumed_store, resumed: str) -> None:
    """torch.equal parameters and optimizer state; identical step, evaluation and sample rows."""
    a, b = store.load_model(reference), resumed_store.load_model(resumed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ca, cb = run_checkpoints(store, reference).load(), run_checkpoints(resumed_store, resumed).load()
    for sa, sb in zip(ca["optimizer"]["state"].values(), cb["optimizer"]["state"].values(), strict=True):
        assert all(torch.equal(torch.as_tensor(sa[k]), torch.as_tensor(sb[k])) for k in sa)
    assert ca["scheduler"] == cb["scheduler"] and ca["position"] == cb["position"]
    ma, mb = store.read_metrics(reference), resumed_store.read_metrics(resumed)
    assert mb["step"].tolist() == list(range(1, len(ma) + 1))  # each step once, no gaps
    for column in ("epoch", "loss", "grad_norm", "lr", "samples", "samples_seen", "tokens", "tokens_seen"):
        assert ma[column].equals(mb[column]), column
    ea, eb = store.read_evals(reference), resumed_store.read_evals(resumed)
    assert ea["step"].equals(eb["step"]) and ea["test_loss"].equals(eb["test_loss"])
    assert store.samples(reference) == resumed_store.samples(resumed)


def _stopped_at(runner: Runner, gate, config: RunConfig, run_id: str | None, step: int, micro: int) -> str:
    """Start the run (or resume it), hold it at the start of (step, micro) and stop it there: its id."""
    gate.hold(step, micro)
    run_id = runner.submit(config) if run_id is None else runner.resume(run_id)
    gate.wait_until_held()
    runner.stop(run_id)
    gate.release()
    assert _ended(runner, run_id).state == RunState.STOPPED
    return run_id


def _stops(name: str, windows: int) -> list[tuple[int, int]]:
    """(step, micro) to hold and stop at: mid-window in the first epoch; or at the first epoch's last (partial)
    window after its first micro-batch, and mid-way into the second epoch at a window's end."""
    return {"mid_window": [(7, 1)], "three_stops": [(5, 2), (windows, 0), (windows + 3, 3)]}[name]


@pytest.mark.parametrize("packing", PACKINGS, ids=["padded", "packed"])
@pytest.mark.parametrize("name", ["mid_window", "three_stops"])
def test_a_run_on_a_cached_corpus_stopped_and_resumed_equals_the_uninterrupted_run(references, corpus, tmp_path,
                                                                                   gate, monkeypatch, packing, name):
    store, done = references
    reference, reference_reads, num_train = done[packing]
    cache = tmp_path / "cache"
    config = _config(corpus, packing, cache)
    windows = windows_per_epoch(num_train, config.micro_batch_size, config.accum_steps)
    assert num_train % config.effective_batch_size  # each epoch ends with a partial window
    reads, runner, run_id, built = Reads(monkeypatch), Runner(tmp_path / "runs"), None, None
    segments = []
    for step, micro in _stops(name, windows):
        run_id = _stopped_at(runner, gate, config, run_id, step, micro)
        position = run_checkpoints(runner.store, run_id).load()["position"]
        done_micro = micro + 1  # the held micro-batch finishes; the stop is seen before the next
        assert position["micro"] == done_micro % config.accum_steps
        assert position["epoch"] == (step - 1) // windows  # stopped in this epoch, not at its end
        segments.append(reads.taken(num_train))
        (folder,) = [p for p in cache.iterdir() if p.is_dir()]  # the first segment tokenised the corpus
        meta = (folder / "meta.json").stat().st_mtime_ns
        assert built in (None, meta)  # later segments read the cache the first one built
        built = meta
    runner.resume(run_id)
    assert _ended(runner, run_id).state == RunState.FINISHED
    segments.append(reads.taken(num_train))
    assert (folder / "meta.json").stat().st_mtime_ns == built and len([p for p in cache.iterdir() if p.is_dir()]) == 1

    # The same windows, in order: the segments' micro-batches joined are the uninterrupted run's, each read once.
    assert [indices for segment in segments for indices in segment] == reference_reads
    assert len(reference_reads) == config.epochs * len(_micro_batches(num_train, config)) and all(segments)
    _assert_same_run(store, reference, runner.store, run_id)
    history = runner.store.read_status(run_id)["segments"]
    assert len(history) == len(_stops(name, windows)) + 1 and history[-1]["to_step"] == config.epochs * windows


def _micro_batches(num_train: int, config: RunConfig) -> list[int]:
    """Every micro-batch of an epoch: b samples each, the last one short."""
    return [min(config.micro_batch_size, num_train - start) for start in range(0, num_train, config.micro_batch_size)]


def test_a_corpus_changed_between_stop_and_resume_is_not_resumed_silently(corpus, tmp_path, gate):
    """Its windows would not be the ones the run began with: resume must refuse (or fail), naming the corpus."""
    text = tmp_path / "notes.jsonl"
    text.write_bytes(corpus.read_bytes())
    runner, config = Runner(tmp_path / "runs"), _config(text, "off", tmp_path / "cache")
    run_id = _stopped_at(runner, gate, config, None, 7, 1)
    text.write_text("".join(json.dumps({"text": t + " and more"}) + "\n" for t in TEXTS), encoding="utf-8")
    try:
        runner.resume(run_id)
        snapshot = _ended(runner, run_id)
        said = snapshot.message if snapshot.state != RunState.FINISHED else ""
    except ValueError as exc:  # CheckpointError, ConfigError and DataError are ValueErrors
        said = str(exc)
    assert "the data changed since the checkpoint" in said and said.count("notes.jsonl-") == 2, said

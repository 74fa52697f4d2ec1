"""Data-parallel runs on a cached corpus (gloo on the CPU, 2 processes): padded and packed, they train the parameters
one process trains on the same global windows, token-weighted (both in one spawned pair of ranks); and the ranks of a
torchrun job build a corpus not yet tokenised once, one waiting on the lock of the other's build. Shared runs and
oracles: tests/jobs.py.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

import pytest
import torch

from gaccum_core.config import RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.data.text import cache_root, corpus_source
from gaccum_core.data.token_cache import cache_folder
from gaccum_core.data.tokens import tokens_for
from gaccum_core.states import RunState
from jobs import (WAIT_S, WORLD, assert_matches_references, is_rank, job_processes, one_process_references, reference,
                  spawned_runs)

pytestmark = pytest.mark.multiprocess

WORDS = "gradient window token cache rank shard packed padded exact".split()
# 40 notes of 3 to 25 words: padded, sequences of 3 to 24 target tokens, so ranks' shares hold different token counts.
TEXTS = [f"Note {i}: " + " ".join(WORDS[(3 * i + j * j) % len(WORDS)] for j in range(2 + (7 * i) % 23)) for i in range(40)]
WAITING = "waiting for another process that tokenises it"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "notes.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    """The module's token cache: the first job builds it, the references and the later jobs read it."""
    return tmp_path_factory.mktemp("cache")


def _config(corpus: Path, packing: str, cache: Path) -> RunConfig:
    """2 processes with b=2, k=2 (global windows of 8) and partial last windows, 2 epochs of SGD with momentum."""
    # lr 0.02: at 0.05 float rounding grew over the 42 steps until the two 1-process references' grad norms
    # differed by 1.2e-5 (relative), past the oracle's 1e-5; at 0.02 every step stays within 5e-7.
    return RunConfig(model="gpt", dataset="text", text_file=str(corpus), cache_dir=str(cache), packing=packing,
                     max_seq_len=24, micro_batch_size=2, accum_steps=2, nproc=WORLD, epochs=2, device="cpu",
                     optimizer="sgd", lr=0.02, momentum=0.9)


@pytest.fixture(scope="module")
def runs(corpus, shared_cache, tmp_path_factory):
    """The padded and the packed job trained one after the other by one spawned pair of ranks (one start, not a
    torchrun job each), the first building the shared cache: the runs by config."""
    configs = [_config(corpus, packing, shared_cache) for packing in ("off", "on")]
    return spawned_runs(configs, tmp_path_factory.mktemp("corpus_ranks"))


@pytest.mark.parametrize("packing", ["off", "on"], ids=["padded", "packed"])
def test_two_processes_on_a_cached_corpus_equal_one_process(runs, corpus, shared_cache, packing):
    """The job's parameters, losses and grad norms equal 1 process (b=4, k=2) and (b=8, k=1) reading the same
    cache, within the DDP oracles' tolerance; the same target tokens per step."""
    config = _config(corpus, packing, shared_cache)
    job = runs[config]
    train = load_data(config).train
    assert len(train) % config.effective_batch_size  # each epoch ends with a partial window
    assert (train.targets.min() < train.targets.max()) == (packing == "off")  # padded: different token counts
    diffs = assert_matches_references(job)
    for name, single in one_process_references(config).items():
        state, rows = reference(single)
        assert job.metrics["tokens"].tolist() == [r["tokens"] for r in rows]
        losses = max(abs(a - r["loss"]) for a, r in zip(job.metrics["loss"], rows, strict=True))
        print(f"{packing} vs {name}: max |param diff| {diffs[name]:.1e}, max |loss diff| {losses:.1e}")
    assert job.metrics["tokens_seen"].iloc[-1] == config.epochs * train.targets.sum().item()
    assert [p.name for p in shared_cache.iterdir() if p.is_dir()] == [_folder(config).name]


def _folder(config: RunConfig) -> Path:
    """config's token cache folder."""
    source = corpus_source(config)
    return cache_folder(cache_root(config), source.name, source.identity(), tokens_for(config))


class _Lock:
    """The flock a build of this corpus takes, held here: every rank of a job must wait for it."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def release(self) -> None:
        os.close(self.fd)


class _Events:
    """What happens in a folder, from inotify (watchdog: streamlit's file watcher): (kind, name, new name)."""

    def __init__(self, folder: Path) -> None:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer

        self.seen: list[tuple[str, str, str]] = []
        events = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event) -> None:
                dest = getattr(event, "dest_path", "") or ""
                events.seen.append((event.event_type, Path(event.src_path).name, Path(dest).name if dest else ""))

        self.observer = Observer()
        self.observer.schedule(Handler(), str(folder), recursive=False)
        self.observer.start()

    def stop_after_rename(self, dest: str, timeout: float = 10.0) -> None:
        """Stop watching once a rename into dest was seen (inotify's events arrive a little after the fact)."""
        deadline = time.monotonic() + timeout
        while not [e for e in self.seen if e[0] == "moved" and e[2] == dest] and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # anything a second build would add after it
        self.observer.stop()
        self.observer.join()


def test_the_ranks_of_a_job_tokenise_an_uncached_corpus_once(runs, corpus, shared_cache, tmp_path, make_runner):
    """With the corpus's lock held here, both ranks wait (rank 0 says so) and nothing is built; let go, one rank
    builds it: one temporary folder, renamed once into the one cache folder, meta.json written once. The job
    trains the parameters of the same job on a cache built before it, bit for bit."""
    cache = tmp_path / "cache"
    cache.mkdir()
    config = _config(corpus, "on", cache)
    folder = _folder(config)
    lock, events = _Lock(cache / f"{folder.name}.lock"), _Events(cache)
    runner = make_runner()
    try:
        run_id = runner.submit(config)
        top, *below = job_processes(runner, run_id)  # torchrun and its rank processes
        ranks = {p.pid for p in below if is_rank(p)}
        deadline = time.monotonic() + WAIT_S
        while WAITING not in (snapshot := runner.snapshot(run_id)).message:
            assert not snapshot.done and time.monotonic() < deadline, snapshot.message
            time.sleep(0.05)
        assert snapshot.message == f"tokenising notes.jsonl: {WAITING}"
        assert sorted(p.name for p in cache.iterdir()) == [f"{folder.name}.lock"]  # nobody builds past the lock
    finally:
        lock.release()
    snapshot = runner.wait(run_id, timeout=WAIT_S)
    assert snapshot.state == RunState.FINISHED, snapshot.message
    events.stop_after_rename(folder.name)
    seen = [(kind, name, dest) for kind, name, dest in events.seen if ".tmp-" in name or folder.name in (name, dest)]

    made = [name for kind, name, _ in seen if kind == "created" and ".tmp-" in name]
    renamed = [(name, dest) for kind, name, dest in seen if kind == "moved"]
    print(f"\ncache events: {seen}")
    assert len(made) == 1 and renamed == [(made[0], folder.name)]  # one build, one rename, no second
    assert not [e for e in seen if e[0] == "deleted" and e[1] == folder.name]
    builder = int(made[0].split(".tmp-")[1].split("-")[0])  # the temporary folder is named after its builder's pid
    assert builder in ranks and len(ranks) == WORLD
    assert sorted(p.name for p in cache.iterdir() if p.is_dir()) == [folder.name]
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    assert meta["documents"] == {"train": 36, "val": 4}

    model = runner.store.load_model(run_id)
    same = runs[_config(corpus, "on", shared_cache)].model  # the same job's ranks on a cache built before it
    assert model.keys() == same.keys() and all(torch.equal(model[k], same[k]) for k in model)

"""Issue 29 B, C: resume refuses, before any rank starts, a sharded (FSDP) run whose checkpoint.dcp files are not
the ones checkpoint.pt recorded (SHA-256) and a checkpoint.pt that loads but is not whole: one line naming the file,
exit 2, no file changed (checksums), the run's state as it was. No torchrun job starts here: the sharded run is
built in this process (DCP writes its directory without a process group), and queueing a run fails the test."""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from gaccum_core.cli.main import main
from gaccum_core.config import RunConfig
from gaccum_core.execution.resume import checkpoints_in, run_checkpoints
from gaccum_core.execution.runner import Runner
from gaccum_core.runs.store import RunStore
from gaccum_core.states import RunState
from gaccum_core.train.checkpoint import SHARDS_DIR, CheckpointError, shard_dir_name
from gaccum_core.train.checkpoint_state import capture_progress
from gaccum_core.train.engine import Engine

SHARDED = RunConfig(model="mlp", dataset="digits", micro_batch_size=8, accum_steps=2, max_steps=6, device="cpu",
                    nproc=2, sharding="fsdp", optimizer="sgd", momentum=0.9)
SINGLE = RunConfig(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2, max_steps=4, checkpoint_every=2)


def _without_process_group(write):
    """DCP without a process group reads and writes as one process, and warns that it does so."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        return write()


@pytest.fixture(scope="module")
def sharded_engine(tmp_path_factory) -> tuple[Engine, Path]:
    """A sharded run stopped at step 2, as rank 0 leaves it: rows, checkpoint.pt and its checkpoint.dcp directory."""
    store = RunStore(tmp_path_factory.mktemp("runs"))
    run_id = store.create(SHARDED)
    checkpoints = run_checkpoints(store, run_id)
    engine = Engine(SHARDED, torch.device("cpu"), checkpoints=checkpoints)
    writer = store.writer(run_id)
    engine.run(writer, steps=2, evaluate=False)
    writer.close()
    shards = _without_process_group(lambda: checkpoints.save_shards(engine.model, engine.optimizer,
                                                                    shard_dir_name(2), digest=True))
    progress = capture_progress(engine.opt, engine.opt.params, engine.training, SHARDED.to_dict(), engine.device)
    checkpoints.save({**progress, **shards})
    store.update_status(run_id, state=RunState.STOPPED, message="stopped by the user")
    return engine, checkpoints.run_dir


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished single-process run (checkpoint.pt, model.pt, both CSVs) to copy and damage."""
    runner = Runner(tmp_path_factory.mktemp("runs"))
    run_id = runner.submit(SINGLE)
    assert runner.wait(run_id, timeout=120).state == RunState.FINISHED
    return runner.store.path(run_id)


@pytest.fixture
def never_queued(monkeypatch):
    """A resume that gets as far as queueing the run (and so starting its ranks) fails the test at once."""
    def queued(self, run):
        raise AssertionError(f"run {run.run_id} was queued: its damage went unseen before the start")
    monkeypatch.setattr(Runner, "_enqueue", queued)


def _checksums(run_dir: Path) -> dict[str, str]:
    """Every file's digest, checkpoint.dcp's included, but .claim's (the lock a resume takes before reading)."""
    return {p.relative_to(run_dir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file() and p.name != ".claim"}


def _refused(run_dir: Path, capsys, *flags: str) -> str:
    """resume's one line of refusal, after checking that it exits 2 and changes no file."""
    before = _checksums(run_dir)
    assert main(["resume", str(run_dir), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gaccum: error: resume {run_dir}:"), err
    assert "Traceback" not in err[0]
    assert _checksums(run_dir) == before
    return err[0]


def _edit_checkpoint(change):
    def damage(run_dir: Path) -> None:
        path = run_dir / "checkpoint.pt"
        state = torch.load(path, weights_only=True)
        change(state)
        torch.save(state, path)
    return damage


def _step_dir(run_dir: Path) -> Path:
    (step_dir,) = (run_dir / SHARDS_DIR).iterdir()
    return step_dir


def _shard(run_dir: Path, name: str) -> Path:
    return _step_dir(run_dir) / name


class _RunsCode:
    """Unpickled, it makes a directory: a .metadata that runs code where DCP's pickle.load reads it."""

    marker = ""

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def _code_running_metadata(run_dir: Path) -> None:
    _RunsCode.marker = str(run_dir.parent / "pickle-ran")
    _shard(run_dir, ".metadata").write_bytes(pickle.dumps(_RunsCode()))


def _file_in_place_of_the_step_dir(run_dir: Path) -> None:
    step_dir = _step_dir(run_dir)
    shutil.rmtree(step_dir)
    step_dir.write_bytes(b"not a directory")


def _set_sharded(value):
    return _edit_checkpoint(lambda state: state.update(sharded=value))


# How each sharded run is damaged, and what its one line says (after the file it names).
SHARDED_DAMAGES = {
    "no .metadata": (lambda d: _shard(d, ".metadata").unlink(), ".metadata is missing"),
    "empty .metadata": (lambda d: _shard(d, ".metadata").write_bytes(b""), ".metadata (0 bytes) does not match"),
    "garbage .metadata": (lambda d: _shard(d, ".metadata").write_bytes(os.urandom(300)), ".metadata (300 bytes) does"),
    "a .metadata that runs code": (_code_running_metadata, ".metadata"),
    "an extra rank's .metadata": (lambda d: _shard(d, "__0.metadata").write_bytes(b"x"),
                                  "__0.metadata is not one of the files checkpoint.pt recorded"),
    "missing .distcp": (lambda d: _shard(d, "__0_0.distcp").unlink(), "__0_0.distcp is missing"),
    "empty .distcp": (lambda d: _shard(d, "__0_0.distcp").write_bytes(b""), "__0_0.distcp (0 bytes) does not match"),
    "truncated .distcp": (lambda d: _shard(d, "__0_0.distcp").write_bytes(_shard(d, "__0_0.distcp").read_bytes()[:900]),
                          "__0_0.distcp (900 bytes) does not match"),
    "a pipe in place of a .distcp": (lambda d: (_shard(d, "__0_0.distcp").unlink(),
                                               os.mkfifo(_shard(d, "__0_0.distcp"))),
                                     "__0_0.distcp is not a regular file"),
    "no checkpoint.dcp": (lambda d: shutil.rmtree(d / SHARDS_DIR), "is missing: checkpoint.pt names it"),
    "a file in place of the step directory": (_file_in_place_of_the_step_dir, "is a file, not a directory"),
    "sharded names a missing directory": (_set_sharded(f"{SHARDS_DIR}/step-000000002-abc"),
                                          f"{SHARDS_DIR}/step-000000002-abc is missing"),
    "sharded names a directory outside": (_set_sharded(f"../elsewhere/{SHARDS_DIR}/step-000000002-abc"),
                                          "checkpoint.pt's sharded is '../elsewhere/"),
    "sharded names an absolute path": (_set_sharded("/tmp"), "checkpoint.pt's sharded is '/tmp'"),
    "sharded is an int": (_set_sharded(7), "checkpoint.pt's sharded is 7: not a directory"),
    "no sharded": (_edit_checkpoint(lambda state: state.pop("sharded")), "checkpoint.pt lacks its sharded directory"),
    "no SHA-256 (written before they were recorded)": (_edit_checkpoint(lambda state: state.pop("sharded_sha256")),
                                                       "records no SHA-256"),
}


@pytest.mark.parametrize("case", list(SHARDED_DAMAGES))
def test_resume_refuses_a_damaged_sharded_checkpoint_before_any_rank_starts(case, sharded_engine, tmp_path, capsys,
                                                                           never_queued):
    _, finished_dir = sharded_engine
    run_dir = tmp_path / finished_dir.name
    shutil.copytree(finished_dir, run_dir)
    damage, said = SHARDED_DAMAGES[case]
    damage(run_dir)
    line = _refused(run_dir, capsys)
    assert said in line, line
    assert not (tmp_path / "pickle-ran").exists()
    assert RunStore(tmp_path).read_status(run_dir.name)["state"] == "stopped"


def test_the_undamaged_sharded_run_passes_the_check_and_is_queued(sharded_engine, tmp_path, monkeypatch):
    """The control: the same copy, undamaged, gets as far as being queued (the run's ranks would start)."""
    _, finished_dir = sharded_engine
    shutil.copytree(finished_dir, tmp_path / finished_dir.name)
    queued = []
    monkeypatch.setattr(Runner, "_enqueue", lambda self, run: queued.append(run.run_id))
    Runner(tmp_path).resume(finished_dir.name)
    assert queued == [finished_dir.name]


def test_save_shards_records_the_sha256_of_every_file_it_wrote(sharded_engine):
    _, run_dir = sharded_engine
    recorded = torch.load(run_dir / "checkpoint.pt", weights_only=True)["sharded_sha256"]
    step_dir = _step_dir(run_dir)
    assert sorted(recorded) == sorted(p.name for p in step_dir.iterdir()) == [".metadata", "__0_0.distcp"]
    assert all(recorded[name] == hashlib.sha256((step_dir / name).read_bytes()).hexdigest() for name in recorded)


def test_each_rank_checks_the_files_again_before_dcp_unpickles_them(sharded_engine, tmp_path):
    """CheckpointManager.load_shards, as each rank calls it: the intact directory loads the saved weights; one
    whose .metadata was replaced by a pickle that runs code is refused naming it, the code never run."""
    engine, finished_dir = sharded_engine
    run_dir = tmp_path / finished_dir.name
    shutil.copytree(finished_dir, run_dir)
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    saved = {k: v.clone() for k, v in engine.model.state_dict().items()}
    with torch.no_grad():
        for param in engine.model.parameters():
            param.zero_()
    checkpoints = checkpoints_in(run_dir)
    _without_process_group(lambda: checkpoints.load_shards(engine.model, engine.optimizer, state))
    assert all(torch.equal(saved[k], v) for k, v in engine.model.state_dict().items())
    _code_running_metadata(run_dir)
    with pytest.raises(CheckpointError, match=r"step-\d+-[0-9a-f]+/\.metadata \(\d+ bytes\) does not match"):
        checkpoints.load_shards(engine.model, engine.optimizer, state)
    assert not (tmp_path / "pickle-ran").exists()


def _wrong_shape(state) -> None:
    key = next(iter(state["model"]))
    state["model"][key] = torch.zeros(3, 3)


# How checkpoint.pt of a finished single-process run is changed, and what the one line says.
INCONSISTENT = {
    "no model": (lambda state: state.pop("model"), "checkpoint.pt lacks its model weights (model)"),
    "a wrong shape": (_wrong_shape, "has shape (3, 3), the model's is"),
    "optimizer not a state dict": (lambda state: state.update(optimizer=[1, 2]),
                                   "checkpoint.pt's optimizer is a list, not an optimizer's state_dict"),
    "empty rng": (lambda state: state.update(rng={}), "checkpoint.pt's rng is an empty dict, not the random"),
    "rngs not a list": (lambda state: state.update(rngs={"torch": 1}), "checkpoint.pt's rngs is a dict, not a list"),
    "a rank's rng damaged": (lambda state: state.update(rngs=[state["rng"], {"torch": torch.zeros(0)}]),
                             "checkpoint.pt's rngs[1] is a dict, not the random generators' states"),
    "a negative step": (lambda state: state["counters"].update(step=-1),
                        "checkpoint.pt's counters.step is -1, not a whole number ≥ 0"),
    "config a list": (lambda state: state.update(config=[1]), "checkpoint.pt's config is a list, not the run's"),
}


@pytest.mark.parametrize("case", list(INCONSISTENT))
def test_resume_refuses_a_checkpoint_that_loads_but_is_not_whole(case, finished, tmp_path, capsys, never_queued):
    run_dir = tmp_path / finished.name
    shutil.copytree(finished, run_dir)
    change, said = INCONSISTENT[case]
    _edit_checkpoint(change)(run_dir)
    line = _refused(run_dir, capsys, "--max-steps", "6")
    assert said in line, line
    assert RunStore(tmp_path).read_status(run_dir.name)["state"] == "finished"


def test_the_engine_refuses_a_wrong_shape_before_loading_it(finished):
    """Each rank checks again, against its own model: a tensor of another shape never reaches load_state_dict."""
    state = torch.load(finished / "checkpoint.pt", weights_only=True)
    _wrong_shape(state)
    engine = Engine(SINGLE.replace(max_steps=6))
    with pytest.raises(CheckpointError, match=r"model\['.+'\] has shape \(3, 3\), the model's is \("):
        engine.resume_from(state)


def test_a_torn_last_row_at_the_checkpoint_step_is_named_in_the_runs_message(finished, tmp_path):
    """Issue 29 J: metrics.csv's row of the checkpoint's step 4 cut short by a kill is dropped on resume; the run's
    message says so, and that the rows go from step 3 to 5."""
    run_dir = tmp_path / finished.name
    shutil.copytree(finished, run_dir)
    metrics = run_dir / "metrics.csv"
    metrics.write_text(metrics.read_text().rstrip("\n")[:-3])  # the last row without its end: a kill mid-write
    runner = Runner(tmp_path)
    runner.resume(run_dir.name, max_steps=6)
    snapshot = runner.wait(run_dir.name, timeout=120)
    assert snapshot.state == RunState.FINISHED
    assert [row["step"] for row in runner.store.metric_rows(run_dir.name)] == [1, 2, 3, 5, 6]
    said = "step 4's row in metrics.csv was cut short (a kill while it was written) and is dropped: the rows go " \
           "from step 3 to 5"
    assert said in snapshot.message and said in runner.store.read_status(run_dir.name)["message"]

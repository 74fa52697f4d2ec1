"""`export --tensorboard DIR [RUN …]` (issue 34): a run recorded before gets the event files it would have written
as it trained (its tb/ deleted first, the export gives back the same scalars, hparams and final figures); bad flags
are one line naming the flag and value."""

from __future__ import annotations

import shutil

import pytest

from gaccum_core.cli.main import main
from gaccum_core.config import RunConfig
from gaccum_core.execution.runner import Runner
from tb_events import event_files, hparams, scalars

# A language run: eval.csv's perplexity and a generated sample per evaluation too.
GPT = RunConfig(model="gpt", dataset="pydoc", max_seq_len=32, micro_batch_size=4, accum_steps=2, max_steps=6,
                eval_every=3, eval_batches=2, device="cpu", optimizer="adamw", lr=1e-3)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A runs directory with a finished image run and a finished language run, and what their own tb/ held."""
    runs = tmp_path_factory.mktemp("runs")
    runner = Runner(runs)
    ids = [runner.submit(RunConfig(model="mlp", micro_batch_size=16, accum_steps=2, max_steps=5, eval_every=2,
                                   device="cpu"), name="mlp"),
           runner.submit(GPT, name="gpt")]
    for run_id in ids:
        assert runner.wait(run_id, timeout=300).state == "finished"
    runner.close()
    written = {run_id: (scalars(runs / run_id / "tb"), hparams(runs / run_id / "tb")) for run_id in ids}
    for run_id in ids:
        shutil.rmtree(runs / run_id / "tb")  # a run recorded before runs wrote their own
    return runs, written


def test_export_gives_an_old_run_the_scalars_and_hparams_it_would_have_written(recorded, tmp_path, capsys):
    runs, written = recorded
    out = tmp_path / "tb"
    assert main(["export", "--tensorboard", str(out), "--runs-dir", str(runs)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"tensorboard --logdir {out}"
    for run_id, (found, settings) in written.items():
        assert len(event_files(out / run_id)) == 1
        assert scalars(out / run_id) == found
        assert hparams(out / run_id) == settings
    assert "eval/perplexity" in found and "final/perplexity" in found


def test_exporting_again_replaces_the_files_and_a_named_run_alone_is_exported(recorded, tmp_path, capsys):
    runs, written = recorded
    first = sorted(written)[0]
    out = tmp_path / "tb"
    for _ in range(2):
        assert main(["export", "--tensorboard", str(out), first, "--runs-dir", str(runs)]) == 0
    assert [p.name for p in out.iterdir()] == [first]
    assert len(event_files(out / first)) == 1
    assert scalars(out / first) == written[first][0]


@pytest.mark.parametrize("flags, words", [
    (["--tensorboard", "RUNS"], "--tensorboard="),
    (["--tensorboard", "OUT", "no-such-run"], "RUN='no-such-run' is not allowed: no such run"),
    (["--tensorboard", "OUT", "../x"], "RUN='../x' is not allowed"),
    (["--tensorboard", "FILE"], "a file, not a folder"),
])
def test_flags_that_cannot_be_used_are_refused_in_one_line(recorded, tmp_path, capsys, flags, words):
    runs, _ = recorded
    (tmp_path / "file").write_text("x")
    where = {"RUNS": str(runs), "OUT": str(tmp_path / "out"), "FILE": str(tmp_path / "file")}
    assert main(["export", *(where.get(f, f) for f in flags), "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gaccum: error: ") and words in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_damaged_run_is_named_and_the_others_exported(recorded, tmp_path, capsys):
    runs, written = recorded
    copy = tmp_path / "runs"
    shutil.copytree(runs, copy)
    damaged = sorted(written)[0]
    (copy / damaged / "config.json").write_text("{not json")
    out = tmp_path / "tb"
    assert main(["export", "--tensorboard", str(out), "--runs-dir", str(copy)]) == 1
    err = capsys.readouterr().err
    assert f"gaccum: {damaged}: not exported: " in err and "config.json" in err and "Traceback" not in err
    assert [p.name for p in out.iterdir()] == [r for r in written if r != damaged]

"""Issue 19 #6: a full disk, for real: a small tmpfs filled to the last byte. Rows are whole lines or
absent, the run ends `failed` on disk too with "no space left on the device holding …", the temporary
files kills and errors leave are removed when the run resumes, and it then finishes with every step once."""

import errno
import json
import subprocess
from pathlib import Path

import pytest

from gaccum_core.config import RunConfig
from gaccum_core.runs.files import CsvAppender, disk_full
from gaccum_core.execution.runner import Runner
from gaccum_core.states import RunState


def fill(directory: Path) -> Path:
    """Write a file until the disk holding directory is full; the file."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as file:
        for size in (1 << 16, 1 << 12, 1 << 8, 1):
            try:
                while True:
                    file.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


def _whole_lines(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n"), f"{path.name} ends with half a row: {text[-80:]!r}"
    return text.splitlines()


def test_a_row_the_full_disk_cuts_is_taken_back(small_disk):
    appender = CsvAppender(small_disk / "metrics.csv", ("step", "text"))
    fill(small_disk)
    written = 0
    with pytest.raises(OSError, match="no space left on the device holding") as caught:
        for step in range(1, 100_000):  # until a row needs a page the disk no longer has
            appender.append({"step": step, "text": "x" * 90})
            written = step
    assert caught.value.errno == errno.ENOSPC
    appender.close()
    lines = _whole_lines(small_disk / "metrics.csv")
    assert lines[0] == "step,text" and [int(line.split(",")[0]) for line in lines[1:]] == list(range(1, written + 1))


def test_a_run_that_fills_the_disk_fails_on_disk_and_resumes_once_there_is_room(small_disk, gate):
    runs = small_disk / "runs"
    runner = Runner(runs)
    config = RunConfig(device="cpu", model="mlp", micro_batch_size=8, accum_steps=2, max_steps=12,
                       checkpoint_every=1, eval_every=2)
    gate.hold(step=5, micro=0)
    run_id = runner.submit(config)
    gate.wait_until_held()
    filler = fill(small_disk)
    gate.release()
    snapshot = runner.wait(run_id, timeout=120)
    assert snapshot.state == RunState.FAILED
    assert snapshot.message.startswith(f"no space left on the device holding {(runs / run_id).resolve()}"), \
        snapshot.message
    status = runner.store.read_status(run_id)
    assert status["state"] == "failed" and status["message"] == snapshot.message
    for name in ("metrics.csv", "eval.csv"):
        _whole_lines(runs / run_id / name)
    assert not list((runs / run_id).glob(".*.tmp"))

    filler.unlink()
    stray = runs / run_id / ".checkpoint.pt.k1ll3d.tmp"  # as a kill during a checkpoint leaves one
    stray.write_bytes(b"\0" * 1000)
    runner.resume(run_id)
    assert runner.wait(run_id, timeout=120).state == RunState.FINISHED
    assert not stray.exists()
    assert runner.store.read_metrics(run_id)["step"].tolist() == list(range(1, 13))
    assert runner.store.read_evals(run_id)["step"].tolist() == [2, 4, 6, 8, 10, 12]


def test_a_full_disk_advises_resuming_only_a_run_that_has_a_checkpoint(tmp_path):
    """Issue 29 J: "then resume the run" only where checkpoint.pt exists to resume from (no tmpfs needed)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "status.json").write_text("{}")
    assert str(disk_full(run_dir, "metrics.csv")).endswith(
        "free some space there, then start the run again (it has no checkpoint to resume from)")
    (run_dir / "checkpoint.pt").write_bytes(b"")
    assert str(disk_full(run_dir, "metrics.csv")).endswith(
        "free some space there, then resume the run from its checkpoint")
    assert str(disk_full(tmp_path, "summary.csv")).endswith("free some space there, then try again")  # no run's folder


def test_a_read_only_file_system_is_called_so_not_unreadable(small_disk, capsys):
    """Issue 29 J: resuming a run on a file system remounted read-only said '.claim … cannot be read'."""
    from gaccum_core.cli.main import main

    runs = small_disk / "runs"
    assert main(["run", "--model", "mlp", "--max-steps", "2", "--checkpoint-every", "1", "--device", "cpu",
                 "--runs-dir", str(runs)]) == 0
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]  # the run; beside it the runs index
    capsys.readouterr()
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    try:
        assert main(["resume", run_dir.name, "--runs-dir", str(runs), "--max-steps", "4"]) == 2
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "is on a read-only file system" in line and "cannot be read" not in line, line
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"

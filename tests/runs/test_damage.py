"""Issue 19 #8, #9: runs whose files were damaged by hand. resume refuses each in one line naming the
file (exit 2, no file changed: checked by checksums), the listing marks the run `damaged`, and one bad
status.json leaves the Home and Runs pages working for every other run."""

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from gaccum_core.cli.main import main
from gaccum_core.config import RunConfig
from gaccum_core.runs.catalog import run_table
from gaccum_core.execution.runner import Runner
from gaccum_core.runs.store import RunStore

ROOT = Path(__file__).resolve().parents[2]
CONFIG = RunConfig(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2, max_steps=4, checkpoint_every=2)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """One finished run (checkpoint, both CSVs) to copy and damage."""
    runs = tmp_path_factory.mktemp("runs")
    runner = Runner(runs)
    run_id = runner.submit(CONFIG)
    assert runner.wait(run_id, timeout=120).state == "finished"
    return runs / run_id


def _checkpoint_without_counters(path: Path) -> None:
    state = torch.load(path, weights_only=True)
    del state["counters"]
    torch.save(state, path)


def _replace_in(name: str, old: str, new: str):
    def damage(path: Path) -> None:
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new, 1))
    return name, damage


def _lines(name: str, change):
    def damage(path: Path) -> None:
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(change(lines)))
    return name, damage


# (file, how it is damaged, what the message says about it; None: the listing cannot see it)
DAMAGES = {
    "empty checkpoint": ("checkpoint.pt", lambda p: p.write_bytes(b""), "is empty"),
    "checkpoint holding a list": ("checkpoint.pt", lambda p: torch.save([1, 2], p), None),
    "checkpoint without counters": ("checkpoint.pt", _checkpoint_without_counters, None),
    "status {": ("status.json", lambda p: p.write_text("{"), "JSONDecodeError"),
    "empty status": ("status.json", lambda p: p.write_text(""), "JSONDecodeError"),
    "binary status": ("status.json", lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\xff\x00"), "UnicodeDecodeError"),
    "status []": ("status.json", lambda p: p.write_text("[]"), "holds a JSON list, not an object"),
    "status with a list for a state": ("status.json", lambda p: p.write_text(
        json.dumps({**json.loads(p.read_text()), "state": ["running"]})), "has state ['running']"),
    "binary config": ("config.json", lambda p: p.write_bytes(b"\xff\xfe\x00\x01binary"), "UnicodeDecodeError"),
    "metrics with a blank line": (*_lines("metrics.csv", lambda ls: ls[:2] + ["\n"] + ls[2:]), "blank line (line 3)"),
    "metrics without a header": (*_lines("metrics.csv", lambda ls: ls[1:]), "header row is missing"),
    "metrics with text in step": (*_replace_in("metrics.csv", "\n2,", "\ntwo,"), "text where numbers belong (step"),
    "metrics with binary bytes": ("metrics.csv", lambda p: p.write_bytes(p.read_bytes()[:80] + b"\xff\xd8\xff"),
                                  "is not UTF-8 text"),
    "eval with text in step": (*_replace_in("eval.csv", "\n0,4,", "\n0,four,"), "text where numbers belong (step"),
}
NAMED = {"checkpoint holding a list": "holds a list", "checkpoint without counters": "lacks its step counters"}


def _checksums(run_dir: Path) -> dict[str, str]:
    """Every file's digest but .claim's, the lock a resume takes (and writes its pid into) before reading."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run_dir.iterdir())
            if p.is_file() and p.name != ".claim"}


@pytest.mark.parametrize("case", list(DAMAGES))
def test_resume_refuses_a_damaged_run_in_one_line_and_changes_no_file(case, finished, tmp_path, capsys):
    file, damage, listed = DAMAGES[case]
    run_dir = tmp_path / finished.name
    shutil.copytree(finished, run_dir)
    damage(run_dir / file)
    before = _checksums(run_dir)
    assert main(["resume", str(run_dir), "--max-steps", "6"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gaccum: error: resume {run_dir}:"), err
    assert file in err[0] and (listed or NAMED[case]) in err[0], err
    assert "Traceback" not in err[0]
    assert _checksums(run_dir) == before
    row = run_table(RunStore(tmp_path)).iloc[0]
    if listed is None:  # only loading the tensors tells: the listing offers Resume, which says why not
        assert row["state"] == "finished"
    else:
        assert row["state"] == "damaged" and row["message"].startswith(f"{file} of run {run_dir.name}"), row
        assert listed in row["message"]


def test_one_bad_status_leaves_home_and_runs_working_for_the_other_runs(finished, tmp_path, monkeypatch):
    monkeypatch.setenv("GACCUM_RUNS_DIR", str(tmp_path))
    good, bad = tmp_path / finished.name, tmp_path / (finished.name + "-bad")
    shutil.copytree(finished, good)
    shutil.copytree(finished, bad)
    status = json.loads((bad / "status.json").read_text())
    (bad / "status.json").write_text(json.dumps({**status, "state": ["running"]}))
    table = run_table(RunStore(tmp_path)).set_index("run_id")
    assert table.loc[good.name, "state"] == "finished"
    assert table.loc[bad.name, "state"] == "damaged" and "has state ['running']" in table.loc[bad.name, "message"]
    for page in ("app.py", "app_pages/2_Runs.py"):
        at = AppTest.from_file(str(ROOT / page), default_timeout=60).run()
        assert not at.exception, (page, at.exception)
        shown = pd_frames(at)
        assert good.name in shown and bad.name in shown, page
    # The Runs page says why above the fold (the message column is far right in the table).
    shown = [re.sub(r"\\(.)", r"\1", w.value) for w in at.warning]  # the Markdown source, escapes undone
    assert shown == [f"Damaged: status.json of run {bad.name} has state ['running']: not one of queued, running, "
                     "finished, stopped, failed, diverged, imported. Delete the run, or repair the file by hand."]


def pd_frames(at: AppTest) -> str:
    """Every dataframe the page drew, as text."""
    return "\n".join(frame.value.to_string() for frame in at.dataframe)


def test_the_runs_page_resume_button_says_why_a_checkpoint_cannot_be_used(finished, tmp_path, monkeypatch):
    monkeypatch.setenv("GACCUM_RUNS_DIR", str(tmp_path))
    run_dir = tmp_path / finished.name
    shutil.copytree(finished, run_dir)
    status = json.loads((run_dir / "status.json").read_text())
    (run_dir / "status.json").write_text(json.dumps({**status, "state": "stopped"}))
    _checkpoint_without_counters(run_dir / "checkpoint.pt")
    before = _checksums(run_dir)
    at = AppTest.from_file(str(ROOT / "app_pages/2_Runs.py"), default_timeout=60).run()
    at.multiselect(key="runs_selected").select(run_dir.name).run()
    at.button(key=f"resume_{run_dir.name}").click().run()
    assert not at.exception
    assert [e.value for e in at.error] == [f"Cannot resume {run_dir.name}: checkpoint.pt lacks its step counters "
                                           "(counters): not a whole gaccum checkpoint"]
    assert _checksums(run_dir) == before

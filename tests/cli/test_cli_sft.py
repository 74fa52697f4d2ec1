"""`run --dataset sft` trains on the bundled records with nothing downloaded; a record missing a field is refused
in one line naming the field and the line, before any run is made."""

from __future__ import annotations

import json

from gaccum_core.cli.main import main
from gaccum_core.runs.store import RunStore
from gaccum_core.train import engine

SMALL = ["--model", "gpt", "--dataset", "sft", "--max-seq-len", "32", "--micro-batch-size", "2", "--accum-steps", "2",
         "--device", "cpu", "--eval-batches", "1", "--tensorboard", "off"]


def test_run_sft_trains_one_step_on_the_bundled_records(tmp_path, token_cache_dir, capsys, monkeypatch):
    monkeypatch.setattr(engine, "sample_text", lambda *args: "")  # the last evaluation's greedy sample: seconds
    assert main(["run", *SMALL, "--max-steps", "1", "--runs-dir", str(tmp_path)]) == 0
    store = RunStore(tmp_path)
    run_id, = store.list_runs()
    config = json.loads((store.path(run_id) / "config.json").read_text())
    assert config["dataset"] == "sft" and config["text_file"] == ""
    assert "[finished] step 1 of 1" in capsys.readouterr().err


def test_a_record_missing_its_completion_is_refused_in_one_line(tmp_path, token_cache_dir, capsys):
    records = tmp_path / "records.jsonl"
    records.write_text('{"prompt": "a", "completion": "b"}\n{"prompt": "c"}\n{"prompt": "d", "completion": "e"}\n')
    code = None
    try:
        code = main(["run", *SMALL, "--text-file", str(records), "--runs-dir", str(tmp_path / "runs")])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--completion-field='completion' is not allowed" in err and "line 2 has no string 'completion'" in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())

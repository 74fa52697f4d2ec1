"""A run whose corpus is not yet tokenised tokenises it first, saying how far in its message (status.json, the
runner's snapshot, the command line's line, the page's progress bar), and stops there when asked."""

from types import SimpleNamespace

import torch

from gaccum_core.config import RunConfig
from gaccum_core.data import tokenising
from gaccum_core.execution import execute as execute_module
from gaccum_core.execution.execute import STOPPED_TOKENISING, execute
from gaccum_core.execution.snapshot import RunSnapshot
from gaccum_core.runs.store import RunStore
from gaccum_core.states import RunState


def _config(tmp_path, **changes) -> RunConfig:
    path = tmp_path / "notes.txt"
    path.write_text("\n\n".join(f"Paragraph {i}: " + "words " * (3 + i % 11) for i in range(80)), encoding="utf-8")
    values = dict(model="gpt", dataset="text", text_file=str(path), cache_dir=str(tmp_path / "cache"), device="cpu",
                  micro_batch_size=2, max_seq_len=16, max_steps=1, eval_every=10**9, checkpoint_every=0)
    return RunConfig(**{**values, **changes})


def test_a_run_tokenises_its_corpus_first_saying_how_far_in_its_message(tmp_path, monkeypatch):
    monkeypatch.setattr(tokenising, "BATCH_DOCUMENTS", 10)
    monkeypatch.setattr(execute_module, "PROGRESS_EVERY_S", 0.0)
    store = RunStore(tmp_path / "runs")
    config = _config(tmp_path)
    run_id = store.create(config)
    written, said = [], []
    real = store.update_status
    monkeypatch.setattr(store, "update_status", lambda run, **fields: written.append(fields.get("message")) or
                        real(run, **fields))
    state, _ = execute(store, run_id, config, torch.device("cpu"), lambda: False, on_message=said.append)
    assert state == RunState.FINISHED
    assert len(said) == 9 and said[-1] == ""  # one message a batch of 10 documents, then the one it had
    assert said[0].startswith("tokenising notes.txt: ") and " of 5 kB · " in said[0] and " s left" in said[0]
    assert [m for m in written if m is not None] == said and store.read_status(run_id)["message"] == ""
    said.clear()
    assert execute(store, store.create(config), config, torch.device("cpu"), lambda: False,
                   on_message=said.append)[0] == RunState.FINISHED
    assert said == []  # cached: nothing to say


def test_a_stop_while_tokenising_stops_the_run_and_caches_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(tokenising, "BATCH_DOCUMENTS", 10)
    store = RunStore(tmp_path / "runs")
    config = _config(tmp_path)
    run_id = store.create(config)
    assert execute(store, run_id, config, torch.device("cpu"), lambda: True) == (RunState.STOPPED, STOPPED_TOKENISING)
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []


def test_the_command_line_and_the_page_show_the_tokenising_message(capsys):
    from dashboard.live import _progress_text
    from gaccum_core.cli.progress import follow

    words = "tokenising notes.txt: 12 of 100 MB · 3.1 MB/s · 800,000 tokens/s · 28 s left"
    snapshot = RunSnapshot("r1", RunConfig(model="gpt", dataset="pydoc"), RunState.RUNNING, words, "cpu", 0, 0, 0,
                           1.0, None, (), (), name="mine")
    assert _progress_text(snapshot).endswith(f"— {words}")
    ended = SimpleNamespace(**{**snapshot.__dict__, "state": RunState.FINISHED, "message": "", "done": True})
    shown = iter([snapshot, ended])
    follow(SimpleNamespace(wait=lambda run_id, timeout=None: next(shown)), "r1")
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"r1 [running] {words}" and lines[1].startswith("r1 [finished] step 0 of ?")

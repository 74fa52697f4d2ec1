"""The command line on a corpus not yet tokenised: `check` tokenises nothing and says so (its size, the time its
tokenisation should take; an hf-dataset's rows), `plan` tokenises it first with its progress on stderr, once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import gaccum_core.cli.plan as cli_plan
from gaccum_core.cli.main import main
from gaccum_core.config import RunConfig
from gaccum_core.data import tokenising
from gaccum_core.data.text import cache_status, tokenise_corpus

ROOT = Path(__file__).resolve().parents[2]
WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex".split()
TEXTS = [f"document {i}: " + " ".join(WORDS[(i * j) % len(WORDS)] for j in range(5 + (7 * i) % 40)) for i in range(60)]
SMALL = ["--model", "gpt", "--max-seq-len", "16", "--device", "cpu"]


def _jsonl(folder: Path, name: str = "corpus.jsonl", texts: list[str] = TEXTS) -> Path:
    path = folder / name
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


def _saved_dataset_dict(folder: Path) -> Path:
    """A DatasetDict saved by datasets' save_to_disk: 50 train rows and a validation split of 10."""
    import datasets

    datasets.disable_progress_bars()
    splits = {"train": TEXTS[:50], "validation": TEXTS[50:]}
    datasets.DatasetDict({k: datasets.Dataset.from_dict({"text": v}) for k, v in splits.items()}).save_to_disk(folder)
    return folder


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of main() in this process."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def _folders(cache: Path) -> list[str]:
    """The token cache's folders (a corpus's cache each; no lock or speed file)."""
    return sorted(p.name for p in cache.iterdir() if p.is_dir()) if cache.exists() else []


def test_check_on_a_corpus_not_tokenised_yet_says_so_and_caches_nothing(tmp_path, token_cache_dir, capsys):
    """One line on stderr with the corpus's size and that no speed was measured yet; exit 2; no cache folder. Once
    tokenised (as plan or run leave it) the same check compares; a second new corpus then gets a time estimate."""
    corpus = _jsonl(tmp_path)
    flags = ["check", *SMALL, "--dataset", "text", "--text-file", str(corpus), "--micro-batch-size", "2",
             "--accum-steps", "2"]
    code, out, err = _run(capsys, *flags)
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"gaccum: --text-file={str(corpus)!r} is not tokenised yet (text: 9 kB to tokenise on Start (no speed "
        "measured here yet), bytes); check reads windows of the tokenised corpus and writes nothing: `plan` or `run` on "
        "it tokenises it once into the token cache, then check compares on it"]
    assert _folders(token_cache_dir) == []

    config = RunConfig(model="gpt", dataset="text", text_file=str(corpus), max_seq_len=16)
    tokenise_corpus(config)
    code, out, err = _run(capsys, *flags)
    assert code == 0 and out.startswith("equal up to float rounding"), err
    assert len(_folders(token_cache_dir)) == 1  # the check added nothing

    other = _jsonl(tmp_path, "other.jsonl", TEXTS[::-1])
    code, _, err = _run(capsys, *flags[:-5], str(other), *flags[-4:])
    assert code == 2 and "is not tokenised yet (text: 9 kB to tokenise on Start (about 1 s at the last measured " \
                          "speed), bytes)" in err
    assert len(_folders(token_cache_dir)) == 1


def test_check_on_a_saved_dataset_dict_says_its_rows_without_tokenising(tmp_path, token_cache_dir):
    """`python -m gaccum_core check --model gpt --dataset hf-dataset --data-dir DIR` on a DatasetDict not yet
    tokenised: its splits' rows, and nothing written, in the cache or the data set's folder."""
    data = _saved_dataset_dict(tmp_path / "saved")
    before = sorted((p.relative_to(data), p.stat().st_mtime_ns) for p in data.rglob("*"))
    done = subprocess.run([sys.executable, "-m", "gaccum_core", "check", *SMALL, "--dataset", "hf-dataset",
                           "--data-dir", str(data), "--micro-batch-size", "2", "--accum-steps", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    print(done.stderr)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"gaccum: --data-dir={str(data)!r} is not tokenised yet (hf-dataset: 50 train / 10 validation rows of 'text' "
        "(save_to_disk, the validation split); 10 kB to tokenise on Start (no speed measured here yet), bytes); "
        "check reads windows of the tokenised corpus and writes nothing: `plan` or `run` on it tokenises it once "
        "into the token cache, then check compares on it"]
    assert _folders(token_cache_dir) == []
    assert sorted((p.relative_to(data), p.stat().st_mtime_ns) for p in data.rglob("*")) == before


def test_plan_tokenises_a_new_corpus_first_with_its_progress_on_stderr(tmp_path, token_cache_dir, capsys):
    """Before the planner's first step: a tokenising line, then planning; one cache folder afterwards, which a second
    plan reads without tokenising again."""
    corpus = _jsonl(tmp_path)
    flags = ["plan", *SMALL, "--dataset", "text", "--text-file", str(corpus), "--effective-batch", "4",
             "--memory-budget-mb", "500", "--timed-steps", "1", "--time-cap-s", "0.1", "--json"]
    code, out, err = _run(capsys, *flags)
    lines = err.splitlines()
    assert code == 0 and json.loads(out)["micro_batch_size"] is not None
    assert re.match(r"gaccum: tokenising corpus\.jsonl: \d+ of \d+ kB · ", lines[0]) and lines[0].endswith(" s left")
    assert all(line.startswith("planning: ") for line in lines[1:]) and len(lines) > 1
    (folder,) = _folders(token_cache_dir)
    meta = (token_cache_dir / folder / "meta.json").stat().st_mtime_ns
    config = RunConfig(model="gpt", dataset="text", text_file=str(corpus), max_seq_len=16)
    assert cache_status(config).cached

    code, _, err = _run(capsys, *flags)
    assert code == 0 and "tokenising" not in err
    assert _folders(token_cache_dir) == [folder] and (token_cache_dir / folder / "meta.json").stat().st_mtime_ns == meta


def test_tokenising_progress_is_a_line_every_so_often_and_the_last(tmp_path, monkeypatch, capsys):
    """Away from a terminal: each progress when due (every_s=0), else the first and the last only."""
    monkeypatch.setattr(tokenising, "BATCH_DOCUMENTS", 10)  # 60 documents: 6 batches, a progress after each
    config = RunConfig(model="gpt", dataset="text", text_file=str(_jsonl(tmp_path)), cache_dir=str(tmp_path / "a"))
    cli_plan.tokenise_with_progress(config, every_s=0)
    every = capsys.readouterr().err.splitlines()
    assert len(every) == 6 and all(line.startswith("gaccum: tokenising corpus.jsonl: ") for line in every)
    cli_plan.tokenise_with_progress(config, every_s=0)  # cached: nothing to say
    assert capsys.readouterr().err == ""
    cli_plan.tokenise_with_progress(config.replace(cache_dir=str(tmp_path / "b")), every_s=3600)
    first_and_last = capsys.readouterr().err.splitlines()
    assert len(first_and_last) == 2 and first_and_last[1].endswith("· 0 s left")


def test_ctrl_c_while_plan_tokenises_exits_130_and_caches_nothing(tmp_path, token_cache_dir, monkeypatch, capsys):
    def interrupt(self, where):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_plan._TokenisingLine, "__call__", interrupt)
    code, out, err = _run(capsys, "plan", *SMALL, "--dataset", "text", "--text-file", str(_jsonl(tmp_path)),
                          "--effective-batch", "4", "--memory-budget-mb", "500")
    assert code == 130 and out == ""
    assert err.splitlines() == ["gaccum: stopped while tokenising the corpus: nothing was cached"]
    assert _folders(token_cache_dir) == []

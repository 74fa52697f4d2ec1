"""Where runs are kept, one rule for the command line and the dashboard: --runs-dir, else GACCUM_RUNS_DIR,
else ./runs. A run started from the command line in another folder shows up in the dashboard."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gaccum_core.cli.main import build_parser, command_help, main
from gaccum_core.runsdir import runs_dir

TINY = ["--model", "mlp", "--micro-batch-size", "16", "--accum-steps", "2", "--device", "cpu"]


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """The command line's working folder: tmp_path/work, whose ./runs would be tmp_path/work/runs."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("GACCUM_RUNS_DIR", raising=False)
    return work


def _run_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if (p / "config.json").exists()) if root.is_dir() else []


def test_run_without_the_flag_trains_into_the_dashboards_runs_dir(elsewhere, monkeypatch, capsys):
    shared = elsewhere.parent / "shared-runs"
    monkeypatch.setenv("GACCUM_RUNS_DIR", str(shared))
    assert main(["run", *TINY, "--max-steps", "2"]) == 0
    (run,) = _run_dirs(shared)
    assert Path(capsys.readouterr().out.strip().splitlines()[-1]).resolve() == run.resolve()
    assert not (elsewhere / "runs").exists()
    # resume finds the run there by its id alone, and extends it
    assert main(["resume", run.name, "--max-steps", "3"]) == 0
    assert len((run / "metrics.csv").read_text().strip().splitlines()) == 1 + 3


def test_the_flag_wins_over_the_environment(elsewhere, monkeypatch):
    shared, given = elsewhere.parent / "shared-runs", elsewhere.parent / "given"
    monkeypatch.setenv("GACCUM_RUNS_DIR", str(shared))
    assert main(["run", *TINY, "--max-steps", "1", "--runs-dir", str(given)]) == 0
    assert len(_run_dirs(given)) == 1 and not shared.exists()


def test_neither_set_means_runs_in_the_working_folder(elsewhere):
    assert runs_dir() == "runs" and runs_dir("mine") == "mine"
    assert main(["run", *TINY, "--max-steps", "1"]) == 0
    assert len(_run_dirs(elsewhere / "runs")) == 1


def test_sweep_commands_name_the_environments_runs_dir(elsewhere, monkeypatch, capsys):
    shared = elsewhere.parent / "shared-runs"
    monkeypatch.setenv("GACCUM_RUNS_DIR", str(shared))
    assert main(["sweep", "--model", "mlp", "--max-steps", "1", "--device", "cpu", "--micro-batch-size", "8,16",
                 "--print-commands"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        words = shlex.split(line)
        assert words[words.index("--runs-dir") + 1] == str(shared)


def test_every_command_with_runs_dir_says_the_rule_in_its_help():
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    taking = [name for name, parser in commands.items()
              if any("--runs-dir" in action.option_strings for action in parser._actions)]
    assert {"run", "resume", "sweep"} <= set(taking)
    for name in taking:
        words = " ".join(command_help(name).split())
        assert "--runs-dir" in words and "GACCUM_RUNS_DIR if set, else ./runs" in words, name


@pytest.mark.parametrize("value,expected", [("/somewhere/runs", "/somewhere/runs"), ("", "runs"), (None, "runs")])
def test_the_server_keeps_runs_where_the_command_line_does(monkeypatch, value, expected):
    from dashboard import server

    if value is None:
        monkeypatch.delenv("GACCUM_RUNS_DIR", raising=False)
    else:
        monkeypatch.setenv("GACCUM_RUNS_DIR", value)
    assert server.runs_dir() == runs_dir() == expected


def test_the_token_cache_goes_beside_the_runs_dir_the_flag_names(elsewhere, monkeypatch):
    """--cache-dir, else GACCUM_CACHE_DIR, else token-cache beside the runs directory the command resolved: the
    flag's, not ./runs in the working folder; in the command's process and in the processes it starts."""
    import gaccum_core.cli.run as cli_run
    from gaccum_core.data.token_cache import default_cache_dir
    from gaccum_core.execution.supervisor import child_env

    monkeypatch.delenv("GACCUM_CACHE_DIR")
    seen = []

    def record(args):  # where the run would tokenise: here, and in a worker process or torchrun rank
        child = subprocess.run([sys.executable, "-c", "from gaccum_core.data.token_cache import default_cache_dir; "
                                "print(default_cache_dir())"], env=child_env(), capture_output=True, text=True)
        seen.extend([default_cache_dir(), Path(child.stdout.strip())])
        return 0

    monkeypatch.setattr(cli_run, "run_command", record)
    given = elsewhere.parent / "given" / "runs"
    assert main(["run", "--model", "mlp", "--runs-dir", str(given)]) == 0
    assert seen == [given.parent / "token-cache"] * 2 and elsewhere / "token-cache" not in seen
    assert "GACCUM_RUNS_DIR" not in os.environ  # the command's runs directory ended with it
    rule = "token-cache beside the runs directory (--runs-dir, else GACCUM_RUNS_DIR, else ./runs)"
    assert "".join(rule.split()) in "".join(command_help("run").split())  # argparse may wrap at a hyphen


def test_a_run_resumed_by_its_directory_finds_the_token_cache_beside_that_runs_dir(elsewhere, monkeypatch):
    import gaccum_core.cli.resume as cli_resume
    from gaccum_core.data.token_cache import default_cache_dir

    monkeypatch.delenv("GACCUM_CACHE_DIR")
    seen = []

    class Recording:  # where the resumed run would tokenise
        def __init__(self, runs_dir, **kwargs):
            seen.append(default_cache_dir())

        def resume(self, run_id, **kwargs):
            raise RuntimeError("not resumed here")

    monkeypatch.setattr(cli_resume, "Runner", Recording)
    run = elsewhere.parent / "other" / "runs" / "20261101-000000-abcdef"
    run.mkdir(parents=True)
    assert main(["resume", str(run)]) == 2
    assert seen == [run.parent.parent / "token-cache"]

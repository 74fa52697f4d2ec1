"""The CLI: flags for every field, one-line errors with exit status 2, the run directory last."""

import dataclasses
import subprocess
import sys

import pytest

from gaccum_core.cli.main import build_parser, command_help, main
from gaccum_core.config import CHOICES, RunConfig
from gaccum_core.config import by_field
from workers import command_line


def test_every_config_field_has_a_flag_and_help():
    help_text = command_help("run")
    for f in dataclasses.fields(RunConfig):
        assert "--" + f.name.replace("_", "-") in help_text
        assert by_field("help")[f.name]
    assert "--runs-dir" in help_text and "--name" in help_text


@pytest.mark.parametrize("command", ["run", "check"])  # plan and sweep take comma lists, checked by the config
def test_a_flag_offers_exactly_the_values_the_config_allows(command, capsys):
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    flags = {a.dest: a for a in commands[command]._actions}
    fields = [f.name for f in dataclasses.fields(RunConfig) if f.name in flags]
    assert set(CHOICES) & set(fields) and "model" in fields
    for name in fields:
        assert flags[name].choices == CHOICES.get(name), name
    with pytest.raises(SystemExit) as exit_:  # gpt_preset's too: refused by the parser, naming the presets
        main([command, "--gpt-preset", "huge"])
    assert exit_.value.code == 2 and "tiny" in capsys.readouterr().err


def test_run_prints_its_directory_last_and_exits_zero(tmp_path, capsys):
    code = main(["run", "--model", "mlp", "--micro-batch-size", "16", "--accum-steps", "2",
                 "--max-steps", "3", "--device", "cpu", "--runs-dir", str(tmp_path)])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    run_dir = out[-1]
    assert run_dir.startswith(str(tmp_path))
    assert (tmp_path / run_dir.rsplit("/", 1)[1] / "model.pt").exists()


@pytest.mark.parametrize("flags,expected", [
    (["--micro-batch-size", "0"], "--micro-batch-size=0"),
    (["--micro-batch-size", "abc"], "--micro-batch-size='abc'"),
    (["--accum-steps", "-3"], "--accum-steps=-3"),
    (["--lr", "nan"], "--lr=nan"),
    (["--lr", "0"], "--lr=0.0"),
    (["--amp", "fp8"], "invalid choice: 'fp8'"),
    (["--model", "gpt9"], "--model='gpt9' is not allowed: one of mlp, cnn, cnn_bn, cnn_gn, resnet18"),
    (["--micro-batch-size", "100000"], "--micro-batch-size=100000"),
    (["--micro-batch-size", "5000"], "at most 1437"),
    (["--model", "vit_b_16"], "multiple of 16"),
    (["--dataset", "mnist", "--data-dir", "{tmp}/nodata"], "download"),
    (["--nproc", "4096"], "--nproc=4096 is not allowed: an integer from 1 to 1024"),
    (["--nproc", "64"], "--nproc=64 is not allowed: 1 to "),
    (["--nnodes", "2"], "--rdzv-endpoint='' is not allowed: HOST:PORT"),
    (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"], "--node-rank=2 is not allowed: 0 to 1"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:99999"], "--rdzv-endpoint='h:99999' is not allowed: HOST:PORT of node "
                                                      "rank 0's machine (a port from 1 to 65535)"),
    (["--rdzv-endpoint", "h:29500"], "--rdzv-endpoint='h:29500' is not allowed: left out with --nnodes=1"),
    (["--fsdp-sync", "last"], "--fsdp-sync='last' is not allowed: every (the default) without --sharding fsdp"),
    (["--memory-budget-mb", "100"], "--memory-budget-mb=100.0 is not allowed: left out unless --micro-batch-size auto"),
    (["--executor", "fork"], "invalid choice: 'fork'"),
])
def test_bad_flag_values_are_one_line_errors_with_no_run_directory(tmp_path, capsys, flags, expected):
    """In this process (one interpreter for all cases; tests/pages/test_bad_input.py runs the real
    entry point): an escaping exception would fail the test outright, so no case can end in a traceback."""
    runs = tmp_path / "runs"
    flags = [f.replace("{tmp}", str(tmp_path)) for f in flags]
    try:
        code = main(["run", "--device", "cpu", "--runs-dir", str(runs), *flags])
    except SystemExit as exc:  # argparse's own refusals exit instead of returning
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], err
    assert "Traceback" not in err
    assert not runs.exists() or not any(runs.iterdir())


def test_no_help_prints_a_doubled_percent_sign():
    """Issue 29 J: argparse %-formats help strings (95%% prints 95%) but not descriptions."""
    from gaccum_core.cli.main import build_parser

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices  # `import` is import_runs.py
    helps = [build_parser().format_help(), *(command_help(name) for name in commands)]
    assert not [text for text in helps if "%%" in text]
    assert "95% interval" in command_help("sweep")


@pytest.mark.multiprocess
def test_a_multi_node_cli_killed_at_the_rendezvous_leaves_no_torchrun(tmp_path):
    """Issue 29 F: node 0's CLI is SIGKILLed while its torchrun holds the rendezvous port, waiting for node 1
    (no rank started yet to notice): torchrun ends with it, and the port is free again."""
    import signal
    import socket
    import time

    import psutil

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    def listening() -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    cli = subprocess.Popen([sys.executable, "-m", "gaccum_core", "run", "--model", "mlp", "--device", "cpu",
                            "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", f"127.0.0.1:{port}",
                            "--runs-dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    torchrun: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while not (torchrun and listening()):
            assert time.monotonic() < deadline and cli.poll() is None, "torchrun never waited at the rendezvous"
            torchrun = [child for child in psutil.Process(cli.pid).children()
                        if "torch.distributed.run" in command_line(child)]
            time.sleep(0.1)
        cli.send_signal(signal.SIGKILL)
        gone, alive = psutil.wait_procs(torchrun, timeout=15)
        assert all(p.status() == psutil.STATUS_ZOMBIE for p in alive), "torchrun outlived its CLI"  # zombie: dead
        assert not listening()
    finally:
        for process in torchrun:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        cli.kill()
        cli.wait()


def test_doctor_reports_versions_device_and_precisions(capsys):
    from gaccum_core.cli.doctor import doctor_report

    report = doctor_report("cpu", check_compile=False)
    for word in ("torch", "CUDA", "CPU", "GiB free", "fp16 autocast  yes", "bf16 autocast  yes"):
        assert word in report


@pytest.mark.parametrize("child,expected", [
    (subprocess.CompletedProcess([], 0, "", ""), "torch.compile yes"),
    (subprocess.CompletedProcess([], 1, "", "Traceback ...\n\nInductorError: gcc: not found\n"),
     "torch.compile no: InductorError: gcc: not found"),
    (subprocess.TimeoutExpired("python", 300), "torch.compile no: no result after 300 s"),
], ids=["works", "fails", "hangs"])
def test_doctor_command_checks_compile_in_a_child_process(
        child: subprocess.CompletedProcess | subprocess.TimeoutExpired, expected: str,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether compile works is the machine's business: the child process is faked, so both answers
    (and a hung compiler) are checked here, and doctor must report exactly what the child said."""
    import gaccum_core.train.device as device

    calls: list[tuple[list[str], dict]] = []

    def fake_run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        calls.append((argv, kwargs))
        if isinstance(child, BaseException):
            raise child
        return child

    monkeypatch.setattr(device.subprocess, "run", fake_run)
    assert main(["doctor", "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    assert out.strip().splitlines()[-1] == expected and err == ""
    ((argv, kwargs),) = calls  # one probe, in a fresh interpreter, that compiles on the asked device
    assert argv[:2] == [sys.executable, "-c"] and "torch.compile" in argv[2] and "'cpu'" in argv[2]
    assert kwargs["timeout"] > 0


@pytest.mark.multiprocess
def test_doctor_with_a_device_this_machine_lacks_is_a_one_line_error():
    done = subprocess.run([sys.executable, "-m", "gaccum_core", "doctor", "--device", "cuda:7"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "--device='cuda:7'" in done.stderr


def test_a_broken_compiler_is_refused_before_any_run_directory(tmp_path, capsys, monkeypatch):
    import gaccum_core.train.device as device

    monkeypatch.setattr(device, "compile_works_here", lambda device: (False, "gcc: not found"))
    code = main(["run", "--compile", "default", "--device", "cpu", "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "--compile='default'" in err[0] and "gcc: not found" in err[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.multiprocess
def test_ctrl_c_stops_a_data_parallel_run_on_every_rank_and_exits_130(tmp_path):
    """Ctrl-C reaches the CLI only (torchrun has its own session): it stops the job through the stop file,
    every rank ends, the run is stopped with its rows, and the exit status is 130."""
    import os
    import signal
    import time

    import pandas as pd
    import psutil

    # Steps 3 to 14 each half a second slower, so Ctrl-C lands mid-run however fast the machine is.
    env = {**os.environ, "GACCUM_FAULTS": ",".join(f"slow@{step}:1*0.5" for step in range(3, 15))}
    cli = subprocess.Popen([sys.executable, "-m", "gaccum_core", "run", "--model", "mlp", "--nproc", "2",
                            "--micro-batch-size", "8", "--accum-steps", "2", "--max-steps", "40", "--device", "cpu",
                            "--runs-dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env,
                           # As from a terminal: a suite started in the background (`cmd &`) passes SIGINT on
                           # ignored, and Python then never raises KeyboardInterrupt.
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    while not list(tmp_path.glob("*/metrics.csv")) or len(pd.read_csv(next(tmp_path.glob("*/metrics.csv")))) < 2:
        assert time.monotonic() < deadline and cli.poll() is None, "the job never logged two steps"
        time.sleep(0.1)
    family = psutil.Process(cli.pid).children(recursive=True)
    assert len(family) >= 3  # torchrun and its two ranks
    cli.send_signal(signal.SIGINT)
    out, err = cli.communicate(timeout=120)
    assert cli.returncode == 130, err[-600:]
    run_dir = out.strip().splitlines()[-1]
    status = __import__("json").loads(open(f"{run_dir}/status.json").read())
    assert status["state"] == "stopped"
    steps = pd.read_csv(f"{run_dir}/metrics.csv")["step"].tolist()
    assert steps == list(range(1, len(steps) + 1)) and len(steps) < 40
    gone, alive = psutil.wait_procs(family, timeout=30)
    assert not alive, f"left behind: {[p.pid for p in alive]}"


def test_resume_extends_a_finished_run_and_refuses_what_it_cannot_do_in_one_line(tmp_path, capsys):
    """`resume RUN --max-steps M` continues a finished run in its directory; bad requests are one-line errors."""
    import pandas as pd

    flags = ["--model", "mlp", "--micro-batch-size", "16", "--accum-steps", "2", "--device", "cpu",
             "--runs-dir", str(tmp_path)]
    assert main(["run", *flags, "--max-steps", "3"]) == 0
    run_dir = capsys.readouterr().out.strip().splitlines()[-1]
    assert main(["resume", run_dir, "--max-steps", "5"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == run_dir
    assert pd.read_csv(f"{run_dir}/metrics.csv")["step"].tolist() == [1, 2, 3, 4, 5]
    for args, expected in ((["resume", run_dir], "finished all its steps"),
                           (["resume", "no-such-run", "--runs-dir", str(tmp_path)], "no such run"),
                           (["resume", "../etc", "--runs-dir", str(tmp_path)], "is not allowed"),
                           (["resume", run_dir, "--max-steps", "-1"], "--max-steps=-1 is not allowed")):
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], err


def _checksums(run_dir: str) -> dict[str, str]:
    import hashlib
    from pathlib import Path

    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(run_dir).iterdir()) if p.is_file()}


@pytest.fixture
def finished_run(tmp_path, capsys):
    """A 6-step mlp run, finished, as `run` leaves it."""
    assert main(["run", "--model", "mlp", "--micro-batch-size", "16", "--accum-steps", "2", "--device", "cpu",
                 "--max-steps", "6", "--checkpoint-every", "2", "--runs-dir", str(tmp_path)]) == 0
    run_dir = capsys.readouterr().out.strip().splitlines()[-1]
    return run_dir


@pytest.mark.parametrize("flags,expected", [
    (["--max-steps", "5"], "--max-steps=5 is not allowed: at least 6 (this run's step limit) or 0 (no limit)"),
    (["--max-steps", "2"], "--max-steps=2 is not allowed: at least 6"),
    (["--epochs", "0"], "--epochs=0 is not allowed"),
])
def test_resume_never_shortens_a_run_and_touches_no_file(finished_run, capsys, flags, expected):
    """Issue 19 #7: a shorter length (below the steps taken, or below the run's limit) is refused in one
    line, exit 2, every file as it was; the help promises 'a new, larger step limit'."""
    before = _checksums(finished_run)
    assert main(["resume", finished_run, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert _checksums(finished_run) == before


def test_resume_names_the_missing_file_instead_of_no_such_run(finished_run, capsys):
    """Issue 19 #10: a run whose eval.csv is gone is not 'no such run': the message names the file."""
    import os

    os.remove(f"{finished_run}/eval.csv")
    assert main(["resume", finished_run, "--max-steps", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "eval.csv" in err[0] and "no such run" not in err[0], err


def test_the_command_line_starts_from_the_train_pages_default_model():
    from gaccum_core.config import DEFAULT_RUN as DEFAULTS
    from gaccum_core.cli.main import build_parser

    args = build_parser().parse_args(["run"])
    assert args.model == DEFAULTS.model == "cnn"
    assert {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)} == DEFAULTS.to_dict()
    assert "(default: cnn)" in " ".join(command_help("run").split())


def test_progress_into_a_pipe_is_whole_lines_with_steps_of_total(tmp_path, capsys):
    code = main(["run", "--model", "mlp", "--max-steps", "3", "--device", "cpu", "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 0 and "\r" not in err and "\x1b" not in err  # no bar redrawn in place
    last = err.strip().splitlines()[-1]
    assert "[finished] step 3 of 3 (100%) · loss " in last, err


def test_progress_lines_say_the_time_left_and_come_at_most_every_few_seconds(capsys):
    from types import SimpleNamespace

    from gaccum_core.cli.progress import follow
    from gaccum_core.states import RunState

    def snap(steps, state=RunState.RUNNING, eta=None):
        return SimpleNamespace(run_id="r1", state=state, steps_done=steps, total_steps=100, eta_s=eta,
                               metrics=(), done=state == RunState.FINISHED, message="")

    shown = iter([snap(0), snap(1, eta=75.0), snap(2, eta=70.0), snap(100, RunState.FINISHED)])
    runner = SimpleNamespace(wait=lambda run_id, timeout=None: next(shown))
    follow(runner, "r1", every_s=3600)
    lines = capsys.readouterr().err.splitlines()
    # The state's first line, then none for an hour (steps 1 and 2), then the end.
    assert lines == ["r1 [running] step 0 of 100 (0%)", "r1 [finished] step 100 of 100 (100%)"]
    shown = iter([snap(0), snap(1, eta=75.0), snap(100, RunState.FINISHED)])
    follow(runner, "r1", every_s=0)
    assert "r1 [running] step 1 of 100 (1%) · 01:15 left" in capsys.readouterr().err.splitlines()


def test_check_refuses_a_window_larger_than_the_training_set_in_one_line(capsys):
    code = main(["check", "--model", "mlp", "--micro-batch-size", "256", "--accum-steps", "64", "--device", "cpu"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("gaccum: error: --accum-steps=64 is not allowed: at most 5 with b = 256") and "1437" in lines[0]


def test_resuming_a_multi_node_run_is_refused_in_one_line_before_anything_starts(tmp_path, capsys):
    """resume has no rendezvous endpoint: a run of 2 machines is refused naming why (it failed in torchrun before)."""
    from gaccum_core.runs.store import RunStore
    from gaccum_core.states import RunState

    store = RunStore(str(tmp_path))
    run_id = store.create(RunConfig(nproc=2, nnodes=2, max_steps=4))
    store.update_status(run_id, state=RunState.STOPPED, message="stopped by the user")
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / run_id).iterdir() if p.name != ".claim")
    assert main(["resume", run_id, "--runs-dir", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "trained on 2 machines" in line and "start it again with run" in line, line
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / run_id).iterdir() if p.name != ".claim") == before
    assert store.read_status(run_id)["state"] == RunState.STOPPED

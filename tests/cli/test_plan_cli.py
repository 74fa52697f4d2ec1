"""The planner's command line: `plan` (table or --json), `run --micro-batch-size auto`, and one-line errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import gaccum_core.cli.plan as cli_plan
from gaccum_core.cli.main import main
from gaccum_core.cli.main import build_parser
from gaccum_core.plan.planner import make_plan

TINY = ["--device", "cpu", "--model", "mlp", "--dataset", "fake", "--image-size", "8", "--fake-samples", "64"]
ROOMY_MB = "50"  # every candidate of the tiny mlp fits with room to spare (its peak is ~0.24 MB)
TOO_SMALL_MB = "0.01"  # below even b=1 (~0.2 MB)


def cli(argv: list[str]) -> int:
    """main() in this process; argparse's own errors exit, others return their status."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("gaccum: error:")]


def test_plan_json_is_one_object_with_the_recommendation_and_rows(capsys):
    code = cli(["plan", *TINY, "--effective-batch", "32", "--memory-budget-mb", ROOMY_MB, "--timed-steps", "1",
                "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert len(out.strip().splitlines()) == 1
    data = json.loads(out)
    assert data["micro_batch_size"] * data["accum_steps"] == 32 == data["effective_batch"]
    assert data["options"] == {"amp": "off", "clear_cache": "off", "compile": "off", "sharding": "ddp",
                               "activation_checkpointing": "off"}
    assert data["memory_source"] == "counted" and data["device"] == "cpu" and data["memory_budget_mb"] == 50.0
    assert (data["precision"], data["time_cap_s"]) == (0.05, 0.6)  # how the speeds were timed
    # b=1, then the memory line's answer (32 = E: every size fits), then the size below it, to time.
    assert [r["micro_batch_size"] for r in data["rows"]] == [1, 32, 16]
    assert all(r["status"] == "fits" and r["peak_mb"] > 0 for r in data["rows"])
    timed = [r for r in data["rows"] if r["timed_steps"] is not None]
    assert [r["micro_batch_size"] for r in timed] == [32, 16]
    assert all(r["timed_steps"] == 1 and r["samples_per_s"] > 0 and r["samples_per_s_error"] is None
               and r["speed"].endswith("(1 step)") for r in timed)  # --timed-steps 1: no interval
    assert data["rows"][0]["samples_per_s"] is None and data["rows"][0]["speed"] is None
    assert data["reason"].startswith(f"fp32 at b={data['micro_batch_size']}")
    assert "Traceback" not in err
    # Away from a terminal, a whole line per memory probe and per timed step, counted against about how many.
    lines = [line for line in err.splitlines() if line.startswith("planning: ")]
    assert len(lines) == len(data["rows"]) + len(timed)
    assert lines[0].startswith("planning: step 1 of about ") and "last: fp32 b=1 fits (" in lines[0]
    assert lines[-1].startswith(f"planning: step {len(lines)} of about {len(lines)} ")


def test_plan_table_prints_the_header_and_the_recommended_flags(capsys):
    code = cli(["plan", *TINY, "--effective-batch", "16", "--memory-budget-mb", ROOMY_MB, "--timed-steps", "3",
                "--time-cap-s", "0.01", "--amp", "off,bf16"])
    out, _ = capsys.readouterr()
    assert code == 0
    lines = out.strip().splitlines()
    header = lines[0].split()
    assert header[:4] == ["options", "b", "k", "status"] and "samples/s" in header and "steps" in header
    table_end = next(i for i, line in enumerate(lines) if line.startswith("device cpu; peak = counted"))
    rows = [line.split() for line in lines[1:table_end]]
    assert {r[0] for r in rows} == {"fp32", "bf16"} and 4 <= len(rows) < 10  # not 1, 2, 4, 8, 16 for each
    # Each timed size: its speed ± the half-width of the 95% interval, over 3 steps (the cap of 0.01 s).
    timed = [line for line in lines[1:table_end] if " ± " in line]
    speed = r"\d[\d,.]* ± \d[\d,.]*( \(interval wider than the value: [^)]*\))?"  # too noisy a speed says so
    assert len(timed) == 4 and all(re.search(speed + " +3 ", line) for line in timed), lines
    assert "(4 timed; samples/s: mean ± 95% interval)" in out
    recommended = [line for line in lines if line.startswith("recommended: --micro-batch-size ")]
    assert len(recommended) == 1
    words = recommended[0].split()
    b, k = int(words[words.index("--micro-batch-size") + 1]), int(words[words.index("--accum-steps") + 1])
    assert b * k == 16 and words[words.index("--amp") + 1] in ("off", "bf16")
    assert "effective batch 16, budget 50 MB" in out
    assert lines[-1].startswith(("fp32 at b=", "bf16 at b="))


def test_plan_with_a_budget_too_small_for_anything_exits_1_with_the_reason(capsys):
    code = cli(["plan", *TINY, "--effective-batch", "32", "--memory-budget-mb", TOO_SMALL_MB, "--timed-steps", "1"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "recommended:" not in out
    assert out.strip().splitlines()[-1].startswith("Nothing fits in ")
    assert "not even b=1 (over budget" in out
    assert not error_lines(err)


@pytest.mark.parametrize("flags,prefix", [
    (["--effective-batch", "0", "--memory-budget-mb", "10"], "gaccum: error: --effective-batch=0 "),
    (["--effective-batch", "-3", "--memory-budget-mb", "10"], "gaccum: error: --effective-batch=-3 "),
    (["--effective-batch", "32", "--memory-budget-mb", "-1"], "gaccum: error: --memory-budget-mb=-1.0 "),
    (["--effective-batch", "32", "--memory-budget-mb", "0"], "gaccum: error: --memory-budget-mb=0.0 "),
    (["--effective-batch", "32", "--memory-budget-mb", "nan"], "gaccum: error: --memory-budget-mb=nan "),
    (["--effective-batch", "32"], "gaccum: error: --memory-budget-mb=None "),  # required on the CPU
    (["--effective-batch", "32", "--memory-budget-mb", "10", "--amp", "fp8"], "gaccum: error: --amp='fp8' "),
    (["--effective-batch", "32", "--memory-budget-mb", "10", "--amp", "off,off"], "gaccum: error: --amp='off,off' "),
    (["--effective-batch", "32", "--memory-budget-mb", "10", "--clear-cache", "sometimes"],
     "gaccum: error: --clear-cache='sometimes' "),
    (["--effective-batch", "32", "--memory-budget-mb", "10", "--compile", "fast"], "gaccum: error: --compile='fast' "),
    (["--effective-batch", "32", "--memory-budget-mb", "10", "--timed-steps", "0"],
     "gaccum: error: --timed-steps=0 "),
    (["--effective-batch", "32", "--memory-budget-mb", "10", "--time-cap-s", "0"], "gaccum: error: --time-cap-s=0.0 "),
    (["--effective-batch", "32", "--memory-budget-mb", "10", "--precision", "1.5"], "gaccum: error: --precision=1.5 "),
])
def test_plan_bad_values_are_one_line_errors_naming_the_flag(flags, prefix, capsys):
    code = cli(["plan", *TINY, *flags])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix + "is not allowed: "), err


@pytest.mark.parametrize("flags,expected", [
    # argparse rejects these before the planner sees them: its line reads "argument --flag: ...".
    (["--effective-batch", "abc", "--memory-budget-mb", "10"], "--effective-batch='abc' is not allowed: an integer"),
    # --model takes timm:NAME too, so the config refuses an unknown model, naming every choice.
    (["--effective-batch", "32", "--memory-budget-mb", "10", "--model", "nope"],
     "--model='nope' is not allowed: one of mlp, cnn"),
    (["--memory-budget-mb", "10"], "the following arguments are required: --effective-batch"),
])
def test_plan_values_argparse_refuses_are_one_line_errors_naming_the_flag(flags, expected, capsys):
    code = cli(["plan", *TINY, *flags])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gaccum: error: ") and expected in lines[0], err


def test_plan_crosses_sharding_modes_per_rank_and_recommends_the_one_fitting_the_largest_b(capsys):
    """Over 2 ranks in 0.2 MB per rank the tiny mlp (weights, gradients and momentum ~0.066 MB each) fits
    only sharded: every mode has a row at each size probed, only ddp's are timed, and the flags say fsdp."""
    code = cli(["plan", *TINY, "--effective-batch", "32", "--memory-budget-mb", "0.2", "--timed-steps", "1",
                "--sharding", "ddp,fsdp/every,fsdp/last", "--nproc", "2", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert data["world_size"] == 2 and data["micro_batch_size"] * data["accum_steps"] == 16  # E / N per rank
    modes = {r["sharding"] for r in data["rows"]}
    assert modes == {"ddp", "fsdp/every", "fsdp/last"}
    sizes = {m: sorted(r["micro_batch_size"] for r in data["rows"] if r["sharding"] == m) for m in modes}
    assert sizes["ddp"] == sizes["fsdp/every"] == sizes["fsdp/last"]
    assert all(r["timed_steps"] is None for r in data["rows"] if r["sharding"] != "ddp")
    safe = {m: max((r["micro_batch_size"] for r in data["rows"] if r["sharding"] == m and r["status"] == "fits"
                    and r["peak_mb"] <= 0.9 * 0.2), default=0) for m in modes}
    assert data["options"]["sharding"] == max(modes, key=lambda m: (safe[m], -["ddp", "fsdp/last",
                                                                               "fsdp/every"].index(m)))
    assert data["options"]["sharding"] != "ddp" and data["micro_batch_size"] == max(safe.values())
    assert data["reason"].startswith(f"fp32 + {data['options']['sharding']} at b={data['micro_batch_size']}")
    assert "not timed" in data["reason"] and "counted per rank" in data["memory_words"]
    for row in data["rows"]:  # per rank: a sharded row holds less of the fixed parts than ddp's at its b
        ddp = next(r for r in data["rows"] if r["sharding"] == "ddp" and r["micro_batch_size"] == row["micro_batch_size"])
        if row["sharding"] != "ddp":
            assert row["weights_mb"] < ddp["weights_mb"] and row["optimizer_mb"] < ddp["optimizer_mb"]
            assert row["activations_mb"] == ddp["activations_mb"]


def test_plan_table_names_the_sharding_flags_of_the_recommendation(capsys):
    code = cli(["plan", *TINY, "--effective-batch", "32", "--memory-budget-mb", "0.2", "--timed-steps", "1",
                "--sharding", "fsdp", "--nproc", "2"])
    out, _ = capsys.readouterr()
    assert code == 0
    recommended = next(line for line in out.splitlines() if line.startswith("recommended: "))
    assert " --sharding fsdp --fsdp-sync " in recommended and recommended.endswith(" --nproc 2")
    assert "effective batch 32 over 2 ranks (16 each), budget per rank 0.2 MB" in out
    assert "fp32 + fsdp/every" in out and "fp32 + fsdp/last" in out and "gathered" in out.splitlines()[0]


@pytest.mark.parametrize("flags,expected", [
    (["--sharding", "fsdp/sometimes", "--nproc", "2"], "--sharding='fsdp/sometimes' is not allowed: one or more of "
                                                       "ddp, fsdp/every, fsdp/last"),
    (["--sharding", "fsdp"], "--sharding='fsdp/every,fsdp/last' is not allowed: ddp with one process"),
    (["--nproc", "0"], "--nproc=0 is not allowed: an integer from 1"),
    (["--nproc", "two"], "--nproc='two' is not allowed: an integer"),
    (["--nproc", "3"], "--effective-batch=32 is not allowed: a multiple of the 3 processes"),
])
def test_bad_sharding_flags_are_one_line_errors_naming_the_flag(flags, expected, capsys):
    code = cli(["plan", *TINY, "--effective-batch", "32", "--memory-budget-mb", "1", *flags])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gaccum: error: ") and expected in lines[0], err


def test_run_auto_plans_with_the_runs_own_sharding_mode(monkeypatch):
    """`run --micro-batch-size auto --sharding fsdp --fsdp-sync last` plans fsdp/last over the run's processes
    (planned here without running the 2-process job)."""
    asked = []
    monkeypatch.setattr(cli_plan, "measure_with_progress", lambda request: asked.append(request) or make_plan(request))
    args = build_parser().parse_args(["run", *TINY, "--nproc", "2", "--sharding", "fsdp", "--fsdp-sync", "last",
                                      "--micro-batch-size", "auto", "--effective-batch", "32",
                                      "--memory-budget-mb", "0.23"])
    config, plan = cli_plan.planned_config(args)
    assert asked[0].sharding == ("fsdp/last",) and asked[0].world_size == 2 and asked[0].effective_batch == 32
    assert (config.sharding, config.fsdp_sync, config.nproc) == ("fsdp", "last", 2)
    assert config.effective_batch_size == 32 and plan.recommended.micro_batch_size == config.micro_batch_size


@pytest.mark.parametrize("flags,expected", [
    (["--micro-batch-size", "auto"], "--effective-batch=None is not allowed: an integer, required with "
                                     "--micro-batch-size auto"),
    (["--micro-batch-size", "8", "--accum-steps", "2", "--effective-batch", "32"],
     "--effective-batch=32 is not allowed: b*k*processes = 16"),
    (["--micro-batch-size", "auto", "--effective-batch", "0", "--memory-budget-mb", "10"], "--effective-batch=0 "),
    (["--micro-batch-size", "auto", "--effective-batch", "32"], "--memory-budget-mb=None "),
])
def test_run_auto_refuses_bad_requests_in_one_line_before_any_run_directory(flags, expected, tmp_path, capsys):
    runs = tmp_path / "runs"
    code = cli(["run", *TINY, "--max-steps", "2", "--runs-dir", str(runs), *flags])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gaccum: error: ") and expected in lines[0], err
    assert not runs.exists()


def test_run_with_a_matching_effective_batch_runs_as_given(tmp_path, capsys):
    runs = tmp_path / "runs"
    code = cli(["run", *TINY, "--max-steps", "1", "--runs-dir", str(runs), "--micro-batch-size", "8",
                "--accum-steps", "4", "--effective-batch", "32"])
    out, err = capsys.readouterr()
    assert code == 0, err
    run_dir = runs / out.strip().splitlines()[-1].rsplit("/", 1)[1]
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["micro_batch_size"], config["accum_steps"]) == (8, 4)
    assert not (run_dir / "plan.json").exists()  # set by hand: no plan


def test_run_auto_plans_then_runs_with_the_plans_micro_batch(tmp_path, capsys):
    runs = tmp_path / "runs"
    code = cli(["run", *TINY, "--max-steps", "2", "--runs-dir", str(runs), "--micro-batch-size", "auto",
                "--effective-batch", "32", "--memory-budget-mb", "0.3"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert not error_lines(err)
    planned = [line for line in err.splitlines() if line.startswith("gaccum: planned: ")]
    assert len(planned) == 1 and "fp32 at b=" in planned[0]
    run_dir = runs / out.strip().splitlines()[-1].rsplit("/", 1)[1]
    assert [p.name for p in runs.iterdir() if p.is_dir()] == [run_dir.name]  # beside it the runs index
    config = json.loads((run_dir / "config.json").read_text())
    plan = json.loads((run_dir / "plan.json").read_text())
    assert config["micro_batch_size"] * config["accum_steps"] == 32
    assert plan["micro_batch_size"] == config["micro_batch_size"]
    assert plan["accum_steps"] == config["accum_steps"] and plan["effective_batch"] == 32
    assert plan["options"] == {"amp": config["amp"], "clear_cache": config["clear_cache"],
                               "compile": config["compile"], "sharding": "ddp",
                               "activation_checkpointing": config["activation_checkpointing"]}
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"


def test_run_auto_with_a_budget_too_small_for_anything_leaves_no_run_behind(tmp_path, capsys):
    runs = tmp_path / "runs"
    code = cli(["run", *TINY, "--max-steps", "2", "--runs-dir", str(runs), "--micro-batch-size", "auto",
                "--effective-batch", "32", "--memory-budget-mb", TOO_SMALL_MB])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    (line,) = error_lines(err)
    assert line.startswith("gaccum: error: --micro-batch-size='auto' is not allowed: Nothing fits in ")
    assert "Traceback" not in err
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.multiprocess
def test_the_real_entry_point_prints_one_json_object_on_stdout():
    done = subprocess.run([sys.executable, "-m", "gaccum_core", "plan", *TINY, "--effective-batch", "8",
                           "--memory-budget-mb", ROOMY_MB, "--timed-steps", "1", "--json"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(done.stdout)  # the progress bar is on stderr only
    assert data["micro_batch_size"] * data["accum_steps"] == 8
    assert data["memory_source"] == "counted" and data["options"]["amp"] == "off"
    assert [r["micro_batch_size"] for r in data["rows"]] == [1, 8, 4]
    assert "Traceback" not in done.stderr


@pytest.mark.multiprocess
def test_the_real_entry_point_refuses_run_auto_that_fits_nothing_with_exit_2(tmp_path):
    runs = tmp_path / "runs"
    done = subprocess.run([sys.executable, "-m", "gaccum_core", "run", *TINY, "--runs-dir", str(runs),
                           "--micro-batch-size", "auto", "--effective-batch", "32", "--memory-budget-mb",
                           TOO_SMALL_MB], capture_output=True, text=True, timeout=180)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = error_lines(done.stderr)
    assert "--micro-batch-size='auto' is not allowed: Nothing fits in " in line
    assert done.stderr.rstrip().splitlines()[-1] == line  # the error is the last thing said
    assert "Traceback" not in done.stderr
    assert not runs.exists() or not any(runs.iterdir())

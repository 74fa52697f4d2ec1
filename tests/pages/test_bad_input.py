"""Bad input: the CLI and the Train page name the field, the value and what is allowed, show no
traceback and leave no run directory; damaged runs on disk are listed as damaged next to good ones."""

import dataclasses
import math
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import streamlit as st
import torch
from streamlit.testing.v1 import AppTest

from gaccum_core.views.charts import CHARTS
from gaccum_core.cli.main import main
from gaccum_core.config import RunConfig

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2, max_steps=2)

# (name, CLI flags, Train page setup, expected words). The setup is (widget key, value) pairs set in
# order; ("config", {field: value}) feeds a value no widget can hold into the config the page builds.
# A word that is a field name may appear as the field or as its CLI flag. "{tmp}" is a scratch
# directory outside the runs directory. The device lacks fp16 and bf16 in every case.
CASES = [
    ("micro-batch 0", ["--micro-batch-size", "0"],
     [("config", {"micro_batch_size": 0})], ["micro_batch_size", "=0", "1 to 65536"]),
    ("micro-batch negative", ["--micro-batch-size", "-8"],
     [("config", {"micro_batch_size": -8})], ["micro_batch_size", "-8", "1 to 65536"]),
    ("micro-batch not a number", ["--micro-batch-size", "eight"],
     [("config", {"micro_batch_size": "eight"})], ["micro_batch_size", "'eight'", "int"]),
    ("micro-batch absurd", ["--micro-batch-size", "1000000000"],
     [("config", {"micro_batch_size": 10**9})], ["micro_batch_size", "1000000000", "1 to 65536"]),
    ("micro-batch above the training set", ["--dataset", "fake", "--fake-samples", "100", "--micro-batch-size", "128"],
     [("cfg_dataset", "fake"), ("cfg_fake_samples", 100), ("cfg_micro_batch_size", 128)],
     ["micro_batch_size", "128", "at most 100"]),
    ("accumulation 0", ["--accum-steps", "0"],
     [("config", {"accum_steps": 0})], ["accum_steps", "=0", "1 to 65536"]),
    ("accumulation negative", ["--accum-steps", "-1"],
     [("config", {"accum_steps": -1})], ["accum_steps", "-1", "1 to 65536"]),
    ("accumulation not a whole number", ["--accum-steps", "2.5"],
     [("config", {"accum_steps": 2.5})], ["accum_steps", "2.5", "int"]),
    ("accumulation absurd", ["--accum-steps", "99999999"],
     [("config", {"accum_steps": 99999999})], ["accum_steps", "99999999", "1 to 65536"]),
    ("lr 0", ["--lr", "0"], [("config", {"lr": 0.0})], ["lr", "0.0", "> 0"]),
    ("lr negative", ["--lr", "-1e-3"], [("config", {"lr": -1e-3})], ["lr", "-0.001", "> 0"]),
    ("lr nan", ["--lr", "NaN"], [("config", {"lr": math.nan})], ["lr", "nan", "finite"]),
    ("lr inf", ["--lr", "inf"], [("config", {"lr": math.inf})], ["lr", "inf", "finite"]),
    ("lr -inf", ["--lr", "-inf"], [("config", {"lr": -math.inf})], ["lr", "-inf", "finite"]),
    ("unknown model", ["--model", "gpt9"], [("config", {"model": "gpt9"})], ["model", "gpt9", "vit_b_16"]),
    ("unknown dataset", ["--dataset", "imagenet"],
     [("config", {"dataset": "imagenet"})], ["dataset", "imagenet", "cifar10"]),
    ("dataset missing offline", ["--dataset", "mnist", "--data-dir", "{tmp}/nodata"],
     [("cfg_dataset", "mnist"), ("cfg_data_dir", "{tmp}/nodata")], ["mnist", "nodata", "download"]),
    ("image size the model cannot take", ["--model", "vit_b_16", "--image-size", "8"],
     [("cfg_model", "vit_b_16"), ("cfg_image_size", 8)], ["image_size", "8×8", "multiple of 16"]),
    ("fp16 the device lacks", ["--amp", "fp16"], [("cfg_amp", "fp16")], ["amp", "fp16", "no fp16 here"]),
    ("bf16 the device lacks", ["--amp", "bf16"], [("cfg_amp", "bf16")], ["amp", "bf16", "off or"]),
    ("runs directory under a regular file", ["--runs-dir", "{tmp}/a-file/runs"], None,
     ["runs_dir", "a-file/runs", "Not a directory"]),
]
FIELDS = {f.name for f in dataclasses.fields(RunConfig)} | {"runs_dir"}
WIDGETS = ("selectbox", "slider", "number_input", "text_input", "radio", "checkbox")


@pytest.fixture
def scratch(tmp_path_factory):
    """A directory outside the runs directory, holding a regular file `a-file`."""
    path = tmp_path_factory.mktemp("scratch")
    (path / "a-file").write_text("not a directory")
    return path


@pytest.fixture(autouse=True)
def no_half_precision(monkeypatch):
    """This 'device' lacks fp16 and bf16, whichever module asks."""
    lacks = lambda device, dtype: (False, "no fp16 here")  # noqa: E731
    monkeypatch.setattr("gaccum_core.train.device.autocast_works", lacks)


def _says(text: str, word: str) -> bool:
    flag = "--" + word.replace("_", "-")
    return word in text or (word in FIELDS and flag in text)


def _fill(value, scratch: Path):
    return value.replace("{tmp}", str(scratch)) if isinstance(value, str) else value


def _run_dirs(path: Path) -> list[Path]:
    return [p for p in path.iterdir() if p.is_dir()] if path.is_dir() else []


@pytest.mark.parametrize("name,flags,ui_setup,words", CASES, ids=[c[0] for c in CASES])
def test_cli_names_the_flag_the_value_and_what_is_allowed(name, flags, ui_setup, words, tmp_path, scratch, capsys):
    runs = tmp_path / "runs"
    try:
        code = main(["run", "--device", "cpu", "--runs-dir", str(runs), *(_fill(f, scratch) for f in flags)])
    except SystemExit as exc:  # argparse's own errors (types, choices) exit from inside the parser
        code = exc.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("gaccum: error: ") and "Traceback" not in err
    for word in words:
        assert _says(lines[0], _fill(word, scratch)), (word, lines[0])
    assert not _run_dirs(runs) and not _run_dirs(scratch)


@pytest.mark.multiprocess
@pytest.mark.parametrize("flags,words", [
    (["--lr", "-inf"], ["--lr=-inf", "finite"]),
    (["--runs-dir", "{tmp}/a-file/runs"], ["--runs-dir", "a-file/runs", "Not a directory"]),
])
def test_a_real_process_exits_2_with_one_line(flags, words, tmp_path, scratch):
    runs = tmp_path / "runs"
    done = subprocess.run([sys.executable, "-m", "gaccum_core", "run", "--device", "cpu", "--runs-dir", str(runs),
                           *(_fill(f, scratch) for f in flags)], capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert all(word in lines[0] for word in words), lines[0]
    assert not _run_dirs(runs) and not (scratch / "a-file").is_dir()


def _set(at: AppTest, key: str, value) -> None:
    for kind in WIDGETS:
        try:
            widget = getattr(at, kind)(key=key)
        except KeyError:
            continue
        widget.select(value) if kind == "selectbox" else widget.set_value(value)
        return
    raise KeyError(f"no widget with key {key!r}")


def _on_page(word):
    """The page names a field by its control's label ("Learning rate = 0.0"), the CLI by its flag."""
    from dashboard.controls import LABELS

    if isinstance(word, str) and word.startswith("=") and len(word) > 1:
        return f"= {word[1:]}"
    return LABELS.get(word, word)


def _train_page() -> AppTest:
    st.cache_data.clear()  # the page remembers settings that passed its check, across AppTests
    return AppTest.from_file(str(ROOT / "app_pages/1_Train.py"), default_timeout=120).run()


@pytest.mark.parametrize("name,flags,ui_setup,words", [c for c in CASES if c[2]], ids=[c[0] for c in CASES if c[2]])
def test_train_page_explains_a_bad_setting_and_will_not_start(name, flags, ui_setup, words, runs_dir, scratch,
                                                               monkeypatch):
    from dashboard import controls

    at = _train_page()
    for key, value in ui_setup:
        if key == "config":
            real = controls.config_from
            monkeypatch.setattr(controls, "config_from", lambda values, raw=value: real({**values, **raw}))
        else:
            _set(at, key, _fill(value, scratch))
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    messages = [e.value for e in at.sidebar.error]
    expected = [_on_page(_fill(w, scratch)) for w in words]
    assert any(all(word in m for word in expected) for m in messages), (expected, messages)
    assert at.button(key="start").disabled
    assert not _run_dirs(runs_dir) and not _run_dirs(scratch)


def test_train_page_with_a_runs_directory_under_a_regular_file_says_so_on_start(scratch, monkeypatch):
    monkeypatch.setenv("GACCUM_RUNS_DIR", str(scratch / "a-file" / "runs"))
    at = _train_page()
    at.selectbox(key="cfg_model").select("mlp")
    at.button(key="start").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("a-file/runs" in e.value and "Not a directory" in e.value for e in at.error), at.error
    assert at.session_state["session_runs"] == [] and (scratch / "a-file").is_file()


def _write_idx(path: Path, array: np.ndarray) -> None:
    header = struct.pack(">I", 0x0800 + array.ndim) + b"".join(struct.pack(">I", d) for d in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def test_train_page_sees_data_placed_after_its_missing_data_error(runs_dir, scratch):
    at = _train_page()
    for key, value in (("cfg_dataset", "mnist"), ("cfg_data_dir", str(scratch / "later"))):
        _set(at, key, value)
        at.run()
    assert any("mnist not found" in e.value for e in at.sidebar.error) and at.button(key="start").disabled
    raw = scratch / "later" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for prefix, n in (("train", 64), ("t10k", 16)):
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", np.zeros((n, 28, 28)))
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", np.arange(n) % 10)
    at.run()
    assert not at.sidebar.error and not at.button(key="start").disabled


def _toolchain(monkeypatch: pytest.MonkeyPatch, works: bool, why: str) -> None:
    """Make preflight's compile probe answer (works, why) without compiling anything, so these tests
    do not depend on this machine's compiler; the real probe (a child process) must not run at all."""
    import gaccum_core.cli.doctor as doctor
    import gaccum_core.train.device as device

    def no_real_probe(*args: object, **kwargs: object) -> tuple[bool, str]:
        raise AssertionError("the real torch.compile probe ran")

    answer = lambda device: (works, why)  # noqa: E731
    monkeypatch.setattr(device, "compile_works", no_real_probe)
    monkeypatch.setattr(doctor, "compile_works", no_real_probe)  # doctor imports the name itself
    monkeypatch.setattr(device, "compile_works_here", answer)


class _FailsOnFirstUse(torch.nn.Module):
    """What torch.compile returns when the toolchain passed the probe but this model cannot be
    compiled: the error is raised by dynamo on the first forward pass."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: object, **kwargs: object) -> torch.Tensor:
        import torch._dynamo.exc

        raise torch._dynamo.exc.TorchRuntimeError("backend='inductor' raised: gcc: not found")


@pytest.fixture
def broken_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe says compile works; compiling the model then fails on its first use."""
    _toolchain(monkeypatch, True, "works")
    monkeypatch.setattr(torch, "compile", lambda model, mode=None, **kwargs: _FailsOnFirstUse(model))


@pytest.fixture
def refused_toolchain(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe says compile does not work here; nothing may be compiled."""
    _toolchain(monkeypatch, False, "gcc: not found")

    def no_compile(*args: object, **kwargs: object) -> torch.nn.Module:
        raise AssertionError("torch.compile was called for a refused toolchain")

    monkeypatch.setattr(torch, "compile", no_compile)


COMPILE_FAILED = "torch.compile(mode='max-autotune') failed on cpu"


def test_cli_compile_failure_is_a_failed_run_with_a_clear_message(broken_compile, tmp_path, capsys):
    code = main(["run", "--device", "cpu", "--runs-dir", str(tmp_path), "--model", "mlp", "--max-steps", "2",
                 "--compile", "max-autotune"])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err
    assert f"failed: {COMPILE_FAILED}" in err and "Set compile to off" in err and "gcc: not found" in err
    run_dir = Path(out.strip().splitlines()[-1])  # a failed run is kept, its traceback in a file
    assert '"state": "failed"' in (run_dir / "status.json").read_text()
    assert "TorchRuntimeError" in (run_dir / "traceback.txt").read_text()
    assert (run_dir / "metrics.csv").read_text().count("\n") == 1  # the header: no step was taken


def test_cli_refuses_compile_where_the_toolchain_does_not_work(refused_toolchain, tmp_path, capsys):
    runs = tmp_path / "runs"
    code = main(["run", "--device", "cpu", "--runs-dir", str(runs), "--model", "mlp", "--compile", "max-autotune"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert "--compile='max-autotune'" in lines[0] and "off" in lines[0] and "gcc: not found" in lines[0]
    assert not _run_dirs(runs)


def test_train_page_compile_failure_shows_the_runs_message(broken_compile, runs_dir):
    from dashboard import server

    at = _train_page()
    for key, value in (("cfg_model", "mlp"), ("cfg_max_steps", 2), ("cfg_compile", "max-autotune")):
        _set(at, key, value)
        at.run()
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    assert server.get_runner().wait(run_id).state == "failed"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(COMPILE_FAILED in e.value and "Set compile to off" in e.value for e in at.error), at.error


def test_train_page_refuses_compile_where_the_toolchain_does_not_work(refused_toolchain, runs_dir):
    at = _train_page()
    for key, value in (("cfg_model", "mlp"), ("cfg_compile", "max-autotune")):
        _set(at, key, value)
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    messages = [e.value for e in at.sidebar.error]
    # The setting, the value, and the probe's reason (whether the field or its control is named).
    assert any("compile" in m and "'max-autotune'" in m and "gcc: not found" in m for m in messages), messages
    assert at.button(key="start").disabled and not _run_dirs(runs_dir)


# (file, new contents, words of the reason shown)
DAMAGE = [
    ("config.json", b"{not json", ["config.json", "valid JSON"]),
    ("config.json", b'{"micro_batch_size": -1}', ["config.json", "micro_batch_size=-1"]),
    ("metrics.csv", bytes(range(256)) * 8, ["metrics.csv"]),
    ("metrics.csv", b"1,0,2,32,32,2.3,0.05,1.1,,0,0,150.0,,150.0,0.1,0.0,0.01,3200.0,0.01\n",
     ["metrics.csv", "header"]),
    ("eval.csv", b"epoch,step,test_loss,test_accuracy,wall_time_s\n0,2,abc,def,0.5\n", ["eval.csv", "text"]),
    ("status.json", b"[]", ["status.json", "not an object"]),
]


def test_damaged_runs_are_listed_as_damaged_next_to_good_ones(runs_dir):
    from dashboard import server

    runner = server.get_runner()
    good = [runner.submit(RunConfig(**TINY)) for _ in range(2)]
    for run_id in good:
        assert runner.wait(run_id).state == "finished"
    damaged = {}
    for i, (name, contents, words) in enumerate(DAMAGE):
        run_id = f"{good[0]}-damaged{i}"
        shutil.copytree(runs_dir / good[0], runs_dir / run_id)
        (runs_dir / run_id / name).write_bytes(contents)
        damaged[run_id] = words
    for page in ("app.py", "app_pages/2_Runs.py"):
        at = AppTest.from_file(str(ROOT / page), default_timeout=60).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        table = at.dataframe[0].value.set_index("run_id")
        assert (table.loc[good, "state"] == "finished").all() and table.loc[good, "steps"].tolist() == [2, 2]
        assert (table.loc[list(damaged), "state"] == "damaged").all(), page
    for run_id, words in damaged.items():  # the Runs page gives the reason
        assert all(word in table.loc[run_id, "message"] for word in words), table.loc[run_id, "message"]
    at.multiselect(key="runs_selected").set_value([*good, *damaged]).run()
    assert not at.exception, [e.value for e in at.exception]
    # The good runs are drawn (fp32, one process: no loss scale, skipped steps, clearing time or collectives);
    # the damaged ones are left out.
    drawn = {chart.key.removeprefix("runs_chart_") for chart in at.get("plotly_chart")}
    assert drawn == set(CHARTS) - {"scale", "skipped", "cache", "collectives"}

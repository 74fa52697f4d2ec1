"""`python -m gaccum_core verify FILE.py`, in-process: exit 0 invariant, 1 not, 2 bad input in one line on stderr
with nothing written (no bytecode beside the file either)."""

import json
from pathlib import Path

import pytest

from gaccum_core.cli.main import command_help, main
from gaccum_core.lab.mistakes import MISTAKES

USES = "from tests.verify.loops import {}\n"
SAMPLE = "from tests.verify.loops import sample_setup, sample_mean as window\n"


def _verify(tmp_path: Path, monkeypatch, capsys, source: str, *flags: str) -> tuple[int, str, str]:
    """verify on a loop file of this source, run in tmp_path: (exit status, stdout, stderr); nothing written."""
    (tmp_path / "loop.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    status = main(["verify", "loop.py", *flags])
    out, err = capsys.readouterr()
    assert sorted(tmp_path.rglob("*")) == before
    return status, out, err


def test_a_correct_loop_exits_0_with_the_verdict_and_the_splits(tmp_path, monkeypatch, capsys):
    source = USES.format("token_setup as setup, correct as window, objective")
    status, out, err = _verify(tmp_path, monkeypatch, capsys, source)
    assert status == 0 and err == ""
    assert out.startswith("split-invariant") and "It matches the objective." in out
    assert "\n1,1,1,1,1,1,1,1    8 " in out and "Fix: nothing to fix" in out


def test_a_mistake_exits_1_with_its_name_and_fix(tmp_path, monkeypatch, capsys):
    source = USES.format("token_setup as setup, weighted_equally as window")
    status, out, _ = _verify(tmp_path, monkeypatch, capsys, source, "--splits", "8/4,4/1,7")
    known = MISTAKES["micro_batches_weighted_equally"]
    assert status == 1 and " ".join(out.split()).count(known.name) == 1 and f"Fix: {known.fix}" in out


def test_json_and_a_fixed_k_with_named_functions(tmp_path, monkeypatch, capsys):
    source = USES.format("token_setup as make, over_fixed_k as step")
    status, out, _ = _verify(tmp_path, monkeypatch, capsys, source, "--setup", "make", "--window", "step",
                             "--fixed-k", "4", "--device", "cpu", "--json")
    report = json.loads(out)
    assert status == 1 and report["mistake"] == "means_over_fixed_k" and report["passed"] is False
    assert report["splits"][0]["sizes"] == [2, 2, 2, 2]


BAD = {
    "no setup": ("def window(model, micro_batches):\n    pass\n", (), "setup='loop.py:setup' is not allowed"),
    "a window that raises": ("from tests.verify.loops import sample_setup as setup\n"
                             "def window(model, micro_batches):\n    raise ValueError('no\\nmore')\n", (),
                             "window raised ValueError: no on the split 8"),
    "B = 1": ("import torch\nfrom tests.verify.loops import sample_mean as window\n"
              "def setup():\n    return torch.nn.Linear(4, 3), {'x': torch.zeros(1, 4), 'y': torch.zeros(1).long()}\n",
              (), "batch of 1 sample is not allowed"),
    "unequal first dimensions": ("import torch\nfrom tests.verify.loops import sample_mean as window\n"
                                 "def setup():\n    return torch.nn.Linear(4, 3), {'x': torch.zeros(8, 4), "
                                 "'y': torch.zeros(6).long()}\n", (), "unequal first dimension (x: 8, y: 6)"),
    "bad --splits": (SAMPLE.replace("sample_setup,", "sample_setup as setup,"), ("--splits", "4,4/3"),
                     "splits='4,4/3' is not allowed"),
    "--splits over --fixed-k": (USES.format("token_setup as setup, over_fixed_k as window"),
                                ("--splits", "1,1,6", "--fixed-k", "2"), "at most 2 micro-batches"),
    "a window taking fixed_k without --fixed-k": (USES.format("token_setup as setup, over_fixed_k as window"), (),
                                                  "the window takes fixed_k, the configured micro-batches per step"),
    "a missing objective": (SAMPLE.replace("sample_setup,", "sample_setup as setup,"), ("--objective", "loss"),
                            "--objective='loss' is not allowed"),
    "a setup that raises": ("from tests.verify.loops import sample_mean as window\n"
                            "def setup():\n    raise OSError('gone')\n", (), "setup in loop.py raised OSError: gone"),
    "a file that does not import": ("import no_such_module_here\n", (), "ModuleNotFoundError"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_exits_2_in_one_line_writing_nothing(tmp_path, monkeypatch, capsys, case):
    source, flags, message = BAD[case]
    status, out, err = _verify(tmp_path, monkeypatch, capsys, source, *flags)
    assert status == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("gaccum: error: ") and message in err and "Traceback" not in err


def test_check_and_verify_name_each_other_in_their_help():
    assert "`check`" in " ".join(command_help("verify").split())
    assert "`verify FILE.py`" in " ".join(command_help("check").split())

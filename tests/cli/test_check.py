"""`check`: the readiness check prints a verdict, the modules and the causes found;
exit status 0 equal, 1 differs, 2 bad input."""

import shlex
import subprocess
import sys

import pytest

from gaccum_core.cli.main import command_help, main
from gaccum_core.config import RunConfig
from gaccum_core.data.text import tokenise_corpus
from hfmodels import saved_model

COUNTER_FACTORY = '''
import torch
import torch.nn as nn


class Counted(nn.Module):
    """A learned scale times how many forward passes it has seen: a buffer updated in forward."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(()))
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        self.count += 1
        return x * self.weight * self.count


class Limited(nn.Module):
    """Fails like an allocator on batches over 4 samples."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        if x.shape[0] > 4:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.net(x)


def _net(input_shape, num_classes):
    channels, height, width = input_shape
    return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, 16), nn.LayerNorm(16), nn.ReLU(),
                         nn.Linear(16, num_classes))


def counted(input_shape, num_classes):
    net = _net(input_shape, num_classes)
    net.append(Counted())
    return net


def limited(input_shape, num_classes):
    return Limited(_net(input_shape, num_classes))
'''


@pytest.fixture(scope="module")
def factory(tmp_path_factory):
    path = tmp_path_factory.mktemp("factory") / "my_models.py"
    path.write_text(COUNTER_FACTORY)
    return path


@pytest.fixture(scope="module")
def notes(tmp_path_factory):
    """Paragraphs of different lengths: the micro-batches hold different token counts."""
    path = tmp_path_factory.mktemp("text") / "notes.txt"
    path.write_text("\n\n".join(f"Note {i}: " + "gradient " * (2 + (5 * i) % 13) for i in range(30)), encoding="utf-8")
    return path


def text_flags(directory, notes):
    return ["--model", f"hf:{directory}", "--dataset", "text", "--text-file", str(notes), "--max-seq-len", "32"]


def tokenised(directory, notes):
    """The notes in the token cache with the model's tokenizer, as `plan` or `run` leave them: check tokenises nothing
    (tests/cli/test_cli_corpus.py)."""
    tokenise_corpus(RunConfig(model=f"hf:{directory}", dataset="text", text_file=str(notes), max_seq_len=32))
    return directory


def check(capsys, *flags, b=2, k=2):
    """(exit status, stdout, stderr) of `check` on the CPU in this process."""
    try:
        code = main(["check", "--micro-batch-size", str(b), "--accum-steps", str(k), "--device", "cpu", *flags])
    except SystemExit as exc:  # argparse's own refusals exit instead of returning
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def rows(out):
    """The module table's rows: {module: verdict}."""
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("module "))
    table = {}
    for line in lines[header + 1:]:
        if not line.strip() or line.startswith("…"):
            break
        name, _params, _error, verdict = line.split(None, 3)
        table[name] = verdict
    return table


def test_a_llama_is_equal_up_to_float_rounding(tmp_path_factory, notes, capsys):
    code, out, err = check(capsys, *text_flags(tokenised(saved_model(tmp_path_factory, "llama"), notes), notes))
    assert code == 0, err
    assert out.startswith("equal up to float rounding")
    table = rows(out)
    assert len(table) == 21 and set(table.values()) == {"equal"}
    assert "model.model.layers.1.self_attn.q_proj" in table and "model.lm_head" in table
    assert max(map(len, out.splitlines())) <= 100


def test_batchnorm_differs_and_each_module_says_why(capsys):
    code, out, _ = check(capsys, "--model", "cnn_bn", k=4)
    assert code == 1
    assert out.startswith("differs: BatchNorm (")
    # cnn_bn: conv 0, BatchNorm2d 1, relu, conv 3, BatchNorm2d 4, ..., linear 8
    assert rows(out) == {"0": "differs: via BatchNorm", "1": "differs: BatchNorm", "3": "differs: via BatchNorm",
                         "4": "differs: BatchNorm", "8": "differs: via BatchNorm"}
    assert "each micro-batch of 2 with its own statistics, not the whole batch of 8" in " ".join(out.split())
    assert "--no-dropout" not in out


def test_dropout_differs_and_the_printed_command_without_it_is_equal(tmp_path_factory, notes, capsys):
    gpt2 = tokenised(saved_model(tmp_path_factory, "gpt2", weights=False, dropout=0.1), notes)
    code, out, _ = check(capsys, *text_flags(gpt2, notes))
    assert code == 1
    assert out.startswith("differs: dropout (")
    assert "'model.transformer.h.0.attn.attn_dropout'" in out
    assert set(rows(out).values()) == {"differs: via dropout"}
    advice = out.splitlines()[-1].strip()
    assert out.splitlines()[-2] == "Dropout is on. To check the model without it, run:"
    assert advice.startswith("python -m gaccum_core check --model ") and advice.endswith(" --no-dropout")
    assert all(len(line) <= 100 for line in out.splitlines()[:-1])  # all but the command, which stays one line

    # The advice as printed, after `python -m gaccum_core check`.
    code, out, err = check(capsys, *shlex.split(advice)[4:])
    assert code == 0, err
    assert out.startswith("equal up to float rounding") and "Dropout is on" not in out


def test_a_buffer_updated_in_forward_is_named(factory, capsys):
    code, out, _ = check(capsys, "--model", f"{factory}:counted")
    assert code == 1
    assert out.startswith("differs: a buffer updated in forward (")
    assert "buffers '5.count'" in " ".join(out.split())
    via = "differs: via a buffer updated in forward"
    assert rows(out) == {"1": via, "2": via, "4": via, "5": "differs: a buffer updated in forward"}


def test_a_big_batch_that_does_not_fit_says_what_does(factory, capsys):
    code, out, err = check(capsys, "--model", f"{factory}:limited", b=2, k=4)
    assert code == 1 and out == ""
    assert err.strip().splitlines() == ["gaccum: the big-batch reference of 8 samples does not fit in memory; "
                                        "the largest that fits is 4 (accum_steps=2): compare at that size"]


@pytest.mark.parametrize("flags,expected", [
    (["--model", "nope"], "gaccum: error: --model='nope' is not allowed: one of mlp, cnn"),
    (["--model", "hf:{tmp}/no-such-model", "--dataset", "text", "--text-file", "{notes}"],
     "gaccum: error: --model='hf:{tmp}/no-such-model' is not allowed: "),
    (["--micro-batch-size", "auto"], "gaccum: error: --micro-batch-size='auto' is not allowed: an integer"),
    (["--nproc", "2"], "gaccum: error: --nproc=2 is not allowed: 1: check compares the two gradients in one process"),
    (["--nnodes", "2"], "gaccum: error: --nnodes=2 is not allowed: 1: check compares"),
])
def test_bad_input_is_one_line_exit_two_and_writes_nothing(tmp_path, monkeypatch, notes, capsys, flags, expected):
    monkeypatch.chdir(tmp_path)
    flags = [f.replace("{tmp}", str(tmp_path)).replace("{notes}", str(notes)) for f in flags]
    code, out, err = check(capsys, *flags)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected.replace("{tmp}", str(tmp_path))), err
    assert list(tmp_path.iterdir()) == []


def test_check_takes_every_config_flag():
    help_text = command_help("check")
    assert "--no-dropout" in help_text and "--text-file" in help_text and "--amp" in help_text


def test_the_entry_point_exits_one_when_it_differs():
    done = subprocess.run([sys.executable, "-m", "gaccum_core", "check", "--model", "cnn_bn", "--micro-batch-size", "2",
                           "--accum-steps", "2", "--device", "cpu"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("differs: BatchNorm") and "Traceback" not in done.stderr

"""Weights-file refusals in gaccum's words (issue 40, item 7).

A weights file set for a model that takes none says which models take one, not "empty with model mlp"; a file
that does not open says what it is not, never torch's hint to load it again with weights_only=False (which would
run the code a pickle holds), and the command line still says it in one line.
"""

import pickle

import pytest
import torch

from gaccum_core.cli.main import main
from gaccum_core.config import TORCHVISION_MODELS, ConfigError
from gaccum_core.models.hf_weights import check_weights


class Gadget:
    """An object a state dict never holds: torch's weights-only unpickler refuses its class."""


def _one_line(capsys, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("model, more", [("mlp", []), ("hf:some/dir", ["--dataset", "pydoc"])])
def test_a_weights_file_for_a_model_that_takes_none_says_which_models_take_one(capsys, model, more):
    line = _one_line(capsys, ["check", "--model", model, "--weights-file", "x.safetensors", *more])
    assert line.startswith("gaccum: error: --weights-file='x.safetensors' is not allowed: "), line
    assert "a weights file applies only to timm:NAME and torchvision models" in line, line
    assert all(name in line for name in TORCHVISION_MODELS) and f"not to {model}" in line, line
    assert "empty with" not in line, line


def _random(path):
    path.write_bytes(bytes(range(256)) * 4)


def _objects(path):
    torch.save({"weight": torch.zeros(2), "gadget": Gadget()}, path)


def _plain_pickle(path):  # protocol 4: torch warns about it on stderr besides refusing it
    path.write_bytes(pickle.dumps({"weight": [1.0, 2.0]}, protocol=4))


def _not_safetensors(path):
    path.write_bytes(b"\x00" * 16)


@pytest.mark.parametrize("name, write, words", [
    ("w.pth", _random, "it is not a file torch.save wrote (damaged, or another format)"),
    ("w.pt", _objects, f"it holds Python objects ({Gadget.__module__}.Gadget), not tensors only"),
    ("w.bin", _plain_pickle, "it is not a file torch.save wrote"),
    ("w.safetensors", _not_safetensors, "it is not a safetensors file (SafetensorError: "),
], ids=["random-bytes", "objects", "plain-pickle", "not-safetensors"])
@pytest.mark.filterwarnings("error")  # torch's warning on a pickle's protocol would be a second line on stderr
def test_a_garbage_weights_file_says_what_it_is_not_in_one_line(tmp_path, capsys, name, write, words):
    path = tmp_path / name
    write(path)
    line = _one_line(capsys, ["check", "--model", "timm:test_resnet", "--weights-file", str(path), "--device", "cpu"])
    assert line.startswith(f"gaccum: error: --weights-file={str(path)!r} is not allowed: a file that opens as a "
                           "state dict"), line
    assert words in line and "weights_only" not in line, line


def test_an_hf_directorys_pickled_objects_are_refused_in_gaccums_words(tmp_path):
    torch.save({"weight": torch.zeros(2), "gadget": Gadget()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(ConfigError) as refused:
        check_weights(f"hf:{tmp_path}", None)  # refused from the file alone, before its config is read
    message = str(refused.value)
    assert f"pytorch_model.bin does not open: it holds Python objects ({Gadget.__module__}.Gadget)" in message, message
    assert "weights_only" not in message, message

"""Your own model (issue 20, part): MODULE:FUNCTION and FILE.py:FUNCTION factories written here,
called with input_shape and num_classes; on an image folder, accumulated against one big batch;
every way a factory can be wrong is one line naming the model field."""

from pathlib import Path

import pytest
import torch

from gaccum_core.cli.main import main
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.models.build import build_seeded_model
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import NullSink
from images import write_pngs

FACTORY = '''
import torch.nn as nn

def build(input_shape, num_classes):
    channels, height, width = input_shape
    return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, 32), nn.LayerNorm(32), nn.ReLU(),
                         nn.Linear(32, num_classes))

def broken(input_shape, num_classes):
    raise RuntimeError("no GPU here")

def not_a_model(input_shape, num_classes):
    return [1, 2, 3]
'''


@pytest.fixture
def factory_file(tmp_path) -> Path:
    path = tmp_path / "my_models.py"
    path.write_text(FACTORY)
    return path


def _trained(config: RunConfig) -> torch.Tensor:
    engine = Engine(config)
    engine.run(NullSink())
    return torch.cat([p.detach().flatten() for p in engine.model.parameters()])


def test_a_factory_model_on_an_image_folder_accumulates_exactly(tmp_path, factory_file):
    """30 PNGs, 24 to train at 12×12: windows of 16, the last 8; two epochs, SGD with momentum."""
    root = write_pngs(tmp_path / "shapes", per_class=10)
    base = dict(model=f"{factory_file}:build", dataset="imagefolder", data_dir=str(root), device="cpu", epochs=2,
                eval_every=0, checkpoint_every=0, optimizer="sgd", lr=0.1)
    accumulated = _trained(RunConfig(**base, micro_batch_size=4, accum_steps=4))
    big = _trained(RunConfig(**base, micro_batch_size=16, accum_steps=1))
    torch.testing.assert_close(accumulated, big, rtol=0, atol=1e-6)


def test_a_dotted_module_factory_gets_the_data_sets_shape_and_classes(tmp_path, factory_file, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    config = RunConfig(model="my_models:build", device="cpu")  # digits: 1×8×8, 10 classes
    model = build_seeded_model(config, (1, 8, 8), 10)
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    again = build_seeded_model(config, (1, 8, 8), 10)  # under the run's seed
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))


@pytest.mark.parametrize("function, words", [
    ("build_it", "a function build_it in"),
    ("broken", "it raised RuntimeError: no GPU here"),
    ("not_a_model", "a factory returning an nn.Module: it returned a list"),
])
def test_a_factory_that_cannot_give_a_model_is_one_line_naming_the_field(tmp_path, factory_file, capsys,
                                                                       function, words):
    model = f"{factory_file}:{function}"
    with pytest.raises(ConfigError, match=words) as caught:
        build_seeded_model(RunConfig(model=model), (1, 8, 8), 10)
    assert caught.value.field == "model"
    code = main(["run", "--model", model, "--device", "cpu", "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "runs").exists()


def test_a_factory_that_cannot_be_imported_is_one_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def build(:\n")
    for model, words in ((f"{tmp_path}/missing.py:build", "there is no file"),
                         (f"{bad}:build", "a file that imports: SyntaxError"),
                         ("no_such_module_here:build", "an importable module: ModuleNotFoundError")):
        with pytest.raises(ConfigError, match=words):
            build_seeded_model(RunConfig(model=model), (1, 8, 8), 10)
    with pytest.raises(ConfigError, match="MODULE:FUNCTION / FILE.py:FUNCTION"):
        RunConfig(model="not a model: at all")

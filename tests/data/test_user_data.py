"""Your own data set (issue 20): --dataset MODULE:FUNCTION / FILE.py:FUNCTION returning (train, test)
Datasets of (float image tensor, int label), batched by gaccum in its own order; wrong types refused."""

import pytest
import torch

from gaccum_core.cli.main import main
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data.load import describe_dataset, load_data
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import NullSink

DATASETS = '''
import torch
from torch.utils.data import Dataset, TensorDataset

def _blobs(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 3
    x = torch.randn(n, 1, 6, 6, generator=g) + y.view(-1, 1, 1, 1).float()
    return TensorDataset(x, y)

def blobs():
    return _blobs(42, 0), _blobs(12, 1)

class Named(Dataset):
    classes = ["a", "b", "c", "d"]
    def __len__(self):
        return 10
    def __getitem__(self, i):
        return torch.full((1, 4, 4), float(i)), i % 2

def named():
    return Named(), Named()

def labels_as_text():
    return [(torch.zeros(1, 4, 4), "cat")] * 4, [(torch.zeros(1, 4, 4), "dog")] * 2

def integer_images():
    return [(torch.zeros(1, 4, 4, dtype=torch.long), 0), (torch.ones(1, 4, 4, dtype=torch.long), 1)] * 2, [(torch.zeros(1, 4, 4, dtype=torch.long), 0)]

def one_thing():
    return TensorDataset(torch.zeros(4, 1, 4, 4), torch.zeros(4, dtype=torch.long))

def fails():
    raise FileNotFoundError("no such file: /data/train.npz")
'''


@pytest.fixture
def datasets_file(tmp_path):
    path = tmp_path / "my_data.py"
    path.write_text(DATASETS)
    return path


def test_a_dataset_function_is_batched_by_index_with_its_shape_and_classes(datasets_file):
    config = RunConfig(model="mlp", dataset=f"{datasets_file}:blobs", device="cpu")
    data = load_data(config)
    assert (len(data.train), len(data.test), data.input_shape, data.num_classes) == (42, 12, (1, 6, 6), 3)
    x, y = data.train.batch(torch.tensor([4, 0]))
    assert x.shape == (2, 1, 6, 6) and x.dtype == torch.float32 and y.tolist() == [1, 0]
    assert describe_dataset(config).endswith("42 train / 12 test, 1×6×6, 3 classes, your datasets")
    named = load_data(RunConfig(model="mlp", dataset=f"{datasets_file}:named", device="cpu"))
    assert named.num_classes == 4  # its classes attribute, though only labels 0 and 1 occur


def test_a_dataset_function_accumulates_exactly_with_a_partial_last_window(datasets_file):
    """42 samples, windows of 16: two full and one of 10, two epochs, SGD with momentum."""
    base = dict(model="mlp", dataset=f"{datasets_file}:blobs", device="cpu", epochs=2, eval_every=0,
                checkpoint_every=0, optimizer="sgd", lr=0.1)

    def trained(**sizes):
        engine = Engine(RunConfig(**base, **sizes))
        engine.run(NullSink())
        return torch.cat([p.detach().flatten() for p in engine.model.parameters()])

    torch.testing.assert_close(trained(micro_batch_size=4, accum_steps=4),
                               trained(micro_batch_size=16, accum_steps=1), rtol=0, atol=1e-6)


@pytest.mark.parametrize("function,words", [
    ("labels_as_text", "item 0's label is a str, not an int"),
    ("integer_images", "item 0's image is a 3-d torch.int64 tensor, not a float tensor"),
    ("one_thing", "a function returning (train, test) datasets: it returned a TensorDataset"),
    ("fails", "it raised FileNotFoundError: no such file: /data/train.npz"),
    ("missing", "a function missing in"),
])
def test_a_wrong_dataset_function_is_one_line_naming_the_dataset(datasets_file, tmp_path, capsys, function, words):
    with pytest.raises(ConfigError) as caught:
        load_data(RunConfig(model="mlp", dataset=f"{datasets_file}:{function}", device="cpu"))
    assert caught.value.field == "dataset" and words in str(caught.value), str(caught.value)
    code = main(["run", "--model", "mlp", "--dataset", f"{datasets_file}:{function}", "--device", "cpu",
                 "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("gaccum: error: --dataset="), err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())

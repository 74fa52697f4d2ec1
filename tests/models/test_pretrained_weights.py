"""Pretrained weights from your disk (issue 34, section 3): a timm or torchvision model started from a state dict
saved here (.safetensors or .pth), its first step's loss that of the saved model on the same batch; a classifier
of other classes reset to the data set's; a file that does not fit refused in one line before anything trains;
a resumed run going on from its checkpoint, never the file again."""

import json
from pathlib import Path

import pytest
import safetensors.torch
import timm
import torch
import torch.nn.functional as F
import torchvision

from gaccum_core.cli.main import main
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.models.build import build_seeded_model
from gaccum_core.train.accumulation import epoch_order
from gaccum_core.train.checks import preflight
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import RowKeeper

# digits: 1×8×8 images, 10 classes; one step of 8 samples
DIGITS = dict(dataset="digits", device="cpu", micro_batch_size=8, accum_steps=1, max_steps=1, eval_every=0,
              checkpoint_every=0, seed=3)


def _saved(net: torch.nn.Module, path: Path) -> Path:
    """net's weights moved away from any seed's draw (deterministically), saved as path's suffix says."""
    with torch.no_grad():
        for i, tensor in enumerate(net.state_dict().values()):
            if tensor.is_floating_point():
                tensor.add_(0.01 * torch.sin(torch.arange(tensor.numel(), dtype=tensor.dtype) + i).view_as(tensor))
    state = {name: t.contiguous() for name, t in net.state_dict().items()}
    if path.suffix == ".safetensors":
        safetensors.torch.save_file(state, path)
    else:
        torch.save(state, path)
    return path


def _timm_resnet(classes: int, channels: int) -> torch.nn.Module:
    torch.manual_seed(123)
    return timm.create_model("test_resnet", num_classes=classes, in_chans=channels)


def _torchvision_resnet(classes: int) -> torch.nn.Module:
    torch.manual_seed(123)
    return torchvision.models.resnet18(num_classes=classes)


def _first_loss(config: RunConfig) -> tuple[float, Engine]:
    engine = Engine(config)
    rows = RowKeeper()
    engine.run(rows)
    return rows.steps[0]["loss"], engine


def _loss_on_first_batch(net: torch.nn.Module, config: RunConfig, rgb: bool = False) -> float:
    """The saved model's mean loss, in train mode as the engine computes it, on the samples of the run's first step."""
    data = load_data(config)
    x, y = data.train.batch(epoch_order(len(data.train), config.seed, 0)[:config.micro_batch_size])
    with torch.no_grad():
        return F.cross_entropy(net.train()(x.expand(-1, 3, -1, -1) if rgb else x), y).item()


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_a_timm_run_starts_from_the_weights_file(tmp_path, suffix):
    saved = _timm_resnet(10, 1)
    path = _saved(saved, tmp_path / f"w{suffix}")
    config = RunConfig(model="timm:test_resnet", weights_file=str(path), **DIGITS)
    expected = _loss_on_first_batch(saved, config)  # before any run: the file holds these weights
    loss, engine = _first_loss(config)
    assert loss == pytest.approx(expected, rel=1e-6, abs=0)
    untrained, _ = _first_loss(config.replace(weights_file=""))
    assert untrained != pytest.approx(expected, rel=1e-3)  # the seed's draw is another model
    assert engine.model.origin.startswith(f"weights loaded from w{suffix} (sha256 ")


def test_a_torchvision_run_starts_from_the_weights_file(tmp_path):
    saved = _torchvision_resnet(10)
    path = _saved(saved, tmp_path / "tv.pth")
    config = RunConfig(model="resnet18", weights_file=str(path), **DIGITS)
    expected = _loss_on_first_batch(saved, config, rgb=True)  # digits' one channel repeated, as the model sees it
    loss, _ = _first_loss(config)
    assert loss == pytest.approx(expected, rel=1e-6, abs=0)


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    inner = getattr(model, "net", model)  # a torchvision model behind its input adapter
    return inner.state_dict()


@pytest.mark.parametrize("model, head", [("timm:test_resnet", "fc"), ("resnet18", "fc")])
def test_a_classifier_of_other_classes_is_reset_to_the_data_sets(tmp_path, model, head):
    """Saved with ImageNet's 1000 classes (and, for timm, 3 channels, which timm adapts to digits' one): every other
    weight is the file's, the classifier the one the run's seed draws for 10 classes."""
    saved = _timm_resnet(1000, 3) if model.startswith("timm") else _torchvision_resnet(1000)
    path = _saved(saved, tmp_path / "imagenet.safetensors")
    config = RunConfig(model=model, weights_file=str(path), **DIGITS)
    preflight(config)
    data = load_data(config)
    built = _state(build_seeded_model(config, data.input_shape, data.num_classes))
    drawn = _state(build_seeded_model(config.replace(weights_file=""), data.input_shape, data.num_classes))
    file = saved.state_dict()
    for name, tensor in built.items():
        if name.startswith(f"{head}."):
            assert torch.equal(tensor, drawn[name]), name
        elif name == "conv1.0.weight":  # timm's stem conv, made for 3 channels: summed into digits' one
            torch.testing.assert_close(tensor, file[name].sum(dim=1, keepdim=True))
        else:
            assert torch.equal(tensor, file[name]), name
    origin = build_seeded_model(config, data.input_shape, data.num_classes).origin
    assert origin.endswith("fc reset to 10 classes (the file scores 1000)"), origin


def _misfit_file(tmp_path: Path) -> Path:
    state = _timm_resnet(10, 1).state_dict()
    del state["layer2.0.conv1.weight"]
    state["layer1.0.conv1.weight"] = torch.zeros(32, 3, 3, 3)
    state["extra.weight"] = torch.zeros(2)
    path = tmp_path / "w.pth"
    torch.save(state, path)
    return path


def test_a_file_that_does_not_fit_is_refused_naming_what_before_training(tmp_path, capsys):
    path = _misfit_file(tmp_path)
    config = RunConfig(model="timm:test_resnet", weights_file=str(path), **DIGITS)
    with pytest.raises(ConfigError) as refused:
        preflight(config)
    assert refused.value.field == "weights_file"
    assert str(refused.value).endswith(
        "a state dict that fits timm:test_resnet: 1 key missing (layer2.0.conv1.weight), 1 unexpected (extra.weight), "
        "1 shape differs (layer1.0.conv1.weight: file 32×3×3×3, model 32×32×3×3)"), refused.value
    runs = tmp_path / "runs"
    for command in (["run", "--runs-dir", str(runs)], ["check"]):
        code = main([*command, "--model", "timm:test_resnet", "--weights-file", str(path), "--device", "cpu",
                     "--max-steps", "1"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1, err
        assert err[0].startswith(f"gaccum: error: --weights-file={str(path)!r} is not allowed"), err
        assert "1 key missing (layer2.0.conv1.weight)" in err[0], err
    assert not runs.exists()  # nothing on disk


@pytest.mark.parametrize("name, content, expected", [
    ("gone.pth", None, "there is no such file"),
    ("junk.pth", b"not a state dict", "a file that opens as a state dict"),
    ("junk.safetensors", b"\x00" * 16, "a file that opens as a state dict"),
])
def test_a_missing_or_unreadable_file_is_refused_in_one_line(tmp_path, capsys, name, content, expected):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    code = main(["run", "--model", "resnet18", "--weights-file", str(path), "--device", "cpu",
                 "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and expected in err[0] and "--weights-file" in err[0], err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("model, weights_file, expected", [
    ("cnn", "w.pth", "a weights file applies only to timm:NAME and torchvision models"),
    ("timm:test_resnet", "w.onnx", "the path of the model's state dict in a .safetensors, .pth, .pt, .bin file"),
])
def test_a_weights_file_the_model_cannot_take_is_refused_by_the_config(model, weights_file, expected):
    with pytest.raises(ConfigError, match=expected) as refused:
        RunConfig(model=model, weights_file=weights_file)
    assert refused.value.field == "weights_file"


def test_an_hf_model_loads_the_weights_in_its_directory_and_refuses_a_weights_file():
    with pytest.raises(ConfigError, match="an hf: model loads the weights saved in its directory"):
        RunConfig(model="hf:some/dir", dataset="pydoc", weights_file="w.safetensors")


def test_a_resumed_run_goes_on_from_its_checkpoint_not_the_file(tmp_path, capsys):
    """Stopped after 2 steps, the file removed, resumed to 4: the same weights as 4 steps in one go."""
    path = _saved(_timm_resnet(10, 1), tmp_path / "w.safetensors")
    flags = ["--model", "timm:test_resnet", "--weights-file", str(path), "--device", "cpu", "--micro-batch-size",
             "8", "--accum-steps", "2", "--runs-dir", str(tmp_path / "runs")]
    assert main(["run", *flags, "--max-steps", "4"]) == 0
    whole = capsys.readouterr().out.strip().splitlines()[-1]
    assert main(["run", *flags, "--max-steps", "2"]) == 0
    halves = capsys.readouterr().out.strip().splitlines()[-1]
    started = json.loads(Path(halves, "status.json").read_text())["weights"]
    assert started.startswith("weights loaded from w.safetensors (sha256 ")
    path.unlink()
    assert main(["resume", halves, "--max-steps", "4"]) == 0, capsys.readouterr().err
    assert json.loads(Path(halves, "status.json").read_text())["weights"] == started
    one, two = (torch.load(Path(d, "model.pt"), weights_only=True) for d in (whole, halves))
    assert all(torch.equal(one[name], two[name]) for name in one)


@pytest.mark.multiprocess
def test_two_processes_start_from_the_file_and_resume_from_the_checkpoint_without_it(tmp_path):
    """Each rank of a torchrun job loads the file; resumed, every rank takes rank 0's checkpoint and none reads it."""
    from gaccum_core.execution.runner import Runner
    from gaccum_core.states import RunState

    path = _saved(_timm_resnet(10, 1), tmp_path / "w.safetensors")
    runner = Runner(tmp_path / "runs", executor="thread")
    try:
        config = RunConfig(model="timm:test_resnet", weights_file=str(path), nproc=2, **{**DIGITS, "max_steps": 2})
        run_id = runner.submit(config)
        snapshot = runner.wait(run_id, timeout=300)
        assert snapshot.state == RunState.FINISHED, snapshot.message
        path.unlink()
        runner.resume(run_id, max_steps=3)
        snapshot = runner.wait(run_id, timeout=300)
        assert snapshot.state == RunState.FINISHED, snapshot.message
        assert runner.store.read_metrics(run_id)["step"].tolist() == [1, 2, 3]
        assert runner.store.read_status(run_id)["weights"].startswith("weights loaded from w.safetensors (sha256 ")
    finally:
        runner.close()


def test_legends_of_runs_apart_by_their_weights_name_the_file_not_its_path():
    from gaccum_core.runs.labels import run_labels

    configs = [RunConfig(model="resnet18"), RunConfig(model="resnet18", weights_file="/far/away/w.pth")]
    assert run_labels(configs) == ["resnet18 b=32 k=4 untrained", "resnet18 b=32 k=4 from w.pth"]

"""`timm:NAME` (issue 20, part): timm's tiny test models, untrained, through the engine against one big
batch; an unknown name refused with close matches (config, CLI, Train page)."""

from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from gaccum_core.cli.main import main
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.models.build import build_seeded_model
from gaccum_core.states import RunState
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import NullSink

# 72 fake 32×32 images: windows of 16, the last one 8 (a partial window).
FAKE = dict(dataset="fake", fake_samples=90, image_size=32, device="cpu", epochs=1, eval_every=0,
            checkpoint_every=0, optimizer="sgd", lr=0.05)


def _trained(**changes) -> torch.Tensor:
    engine = Engine(RunConfig(**{**FAKE, **changes}))
    engine.run(NullSink())
    return torch.cat([p.detach().flatten() for p in engine.model.parameters()])


@pytest.mark.parametrize("name", ["timm:test_vit", "timm:test_convnext"])
def test_a_timm_model_accumulated_equals_one_big_batch_with_a_partial_last_window(name):
    """LayerNorm models (a ViT built for the run's 32×32 images, a ConvNeXt that takes any size)."""
    accumulated = _trained(model=name, micro_batch_size=4, accum_steps=4)
    big = _trained(model=name, micro_batch_size=16, accum_steps=1)
    torch.testing.assert_close(accumulated, big, rtol=0, atol=1e-5)


def test_a_timm_model_gets_the_data_sets_channels_and_classes():
    config = RunConfig(model="timm:test_resnet", dataset="digits", device="cpu")
    data = load_data(config)
    model = build_seeded_model(config, data.input_shape, data.num_classes)
    again = build_seeded_model(config, data.input_shape, data.num_classes)  # the run's seed draws the weights
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    x, _ = data.train.batch(torch.arange(3))  # 1×8×8 digits: timm builds in_chans=1, 10 classes
    assert model(x).shape == (3, 10)


def test_an_unknown_timm_name_is_refused_with_close_matches(tmp_path, capsys):
    config = RunConfig(model="timm:test_resnt", device="cpu")  # the name is timm's to check, when built
    with pytest.raises(ConfigError, match=r"timm has no 'test_resnt' \(did you mean timm:test_resnet"):
        build_seeded_model(config, (3, 32, 32), 10)
    with pytest.raises(ConfigError, match="timm:NAME with a timm model name"):
        RunConfig(model="timm:../../etc")
    code = main(["run", "--model", "timm:test_resnt", "--device", "cpu", "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "did you mean timm:test_resnet" in err[0], err
    assert not (tmp_path / "runs").exists()


def test_the_train_page_takes_your_own_timm_model(runs_dir):
    from dashboard import server

    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app_pages/1_Train.py"), default_timeout=120).run()
    at.selectbox(key="cfg_model").select("your own…").run()
    at.text_input(key="cfg_own_model").input("timm:test_resnt").run()
    assert any("did you mean timm:test_resnet" in e.value for e in at.error)
    assert at.button(key="start").disabled
    at.text_input(key="cfg_own_model").input("timm:test_resnet").run()
    at.number_input(key="cfg_max_steps").set_value(2).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    snapshot = server.get_runner().wait(run_id, timeout=120)
    assert snapshot.state == RunState.FINISHED and snapshot.config.model == "timm:test_resnet"

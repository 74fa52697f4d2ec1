"""Pretrained weights on the pages (issue 34, section 3): the Train page offers a weights file beside a timm or
torchvision model, refuses one that does not fit under it (Start disabled), starts from one that does; the Runs
page says which weights each run started from."""

from pathlib import Path

import timm
import torch
from streamlit.testing.v1 import AppTest

from gaccum_core.states import RunState

ROOT = Path(__file__).resolve().parents[2]
TRAIN = str(ROOT / "app_pages/1_Train.py")
RUNS = str(ROOT / "app_pages/2_Runs.py")


def _weights(path: Path, drop: str = "") -> Path:
    """A timm test_resnet's state dict for digits (1 channel, 10 classes), one key left out when drop names it."""
    torch.manual_seed(7)
    state = timm.create_model("test_resnet", num_classes=10, in_chans=1).state_dict()
    state.pop(drop, None)
    torch.save(state, path)
    return path


def _errors_under(at: AppTest, text: str) -> list[str]:
    return [e.value for e in at.sidebar.error if text in e.value]


def test_the_train_page_takes_a_weights_file_refuses_one_that_does_not_fit_and_starts_from_one(runs_dir, tmp_path):
    from dashboard import server

    at = AppTest.from_file(TRAIN, default_timeout=120).run()
    assert not [t for t in at.text_input if t.key == "cfg_weights_file"]  # cnn, the default, takes none
    at.selectbox(key="cfg_model").select("your own…").run()
    at.text_input(key="cfg_own_model").input("timm:test_resnet").run()
    at.number_input(key="cfg_max_steps").set_value(1).run()
    bad = _weights(tmp_path / "bad.pth", drop="layer2.0.conv1.weight")
    at.text_input(key="cfg_weights_file").input(str(bad)).run()
    refused = _errors_under(at, "Weights file")
    assert refused and "1 key missing (layer2.0.conv1.weight)" in refused[0], refused
    assert at.button(key="start").disabled
    good = _weights(tmp_path / "good.pth")
    at.text_input(key="cfg_weights_file").input(str(good)).run()
    assert not at.error and not at.exception, [e.value for e in at.error]
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    assert server.get_runner().wait(run_id, timeout=120).state == RunState.FINISHED

    runs = AppTest.from_file(RUNS, default_timeout=60)
    runs.query_params["run"] = run_id
    runs.run()
    assert not runs.exception
    settings = next(d.value for d in runs.dataframe if "weights" in d.value.index)
    assert settings.loc["weights_file", run_id] == str(good)
    assert settings.loc["weights", run_id].startswith("weights loaded from good.pth (sha256 "), settings.loc["weights"]


def test_the_train_page_says_a_missing_weights_file_under_its_box(runs_dir, tmp_path):
    at = AppTest.from_file(TRAIN, default_timeout=120).run()
    at.selectbox(key="cfg_model").select("resnet18").run()
    at.text_input(key="cfg_weights_file").input(str(tmp_path / "gone.safetensors")).run()
    assert any("there is no such file" in e for e in _errors_under(at, "Weights file")), [e.value for e in at.error]
    assert at.button(key="start").disabled and not at.exception

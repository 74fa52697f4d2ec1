"""`imagefolder`: PNGs written here into class folders, read back through torchvision's ImageFolder;
the accumulated run against one big batch on them; bad folders refused in one line naming data_dir."""

from pathlib import Path

import pytest
import torch

from gaccum_core.cli.main import main
from gaccum_core.config import RunConfig
from gaccum_core.data.load import describe_dataset, load_data
from gaccum_core.data.sources import DataError
from gaccum_core.train.engine import Engine
from gaccum_core.train.metrics import NullSink
from images import write_pngs


def folder_config(root: Path, **changes) -> RunConfig:
    values = dict(model="mlp", dataset="imagefolder", data_dir=str(root), device="cpu", micro_batch_size=4,
                  accum_steps=4, epochs=1, eval_every=0, checkpoint_every=0)
    return RunConfig(**{**values, **changes})


def test_a_folder_is_split_by_a_fixed_seed_and_resized_to_the_first_images_size(tmp_path):
    root = write_pngs(tmp_path / "shapes", per_class=10, sizes=(12, 16))
    data = load_data(folder_config(root))
    assert (len(data.train), len(data.test)) == (24, 6) and data.num_classes == 3
    assert data.input_shape == (3, 12, 12)  # the first training image's size; the 16×16 ones are resized
    again = load_data(folder_config(root, image_size=8))
    assert again.input_shape == (3, 8, 8)
    x, y = data.train.batch(torch.arange(24))
    assert x.dtype == torch.float32 and sorted(set(y.tolist())) == [0, 1, 2]
    assert describe_dataset(folder_config(root)) == ("imagefolder: 24 train / 6 test, 3×12×12, 3 classes "
                                                     "(circle, cross, square)")


def test_train_and_val_folders_are_used_as_they_are(tmp_path):
    write_pngs(tmp_path / "set" / "train", per_class=5)
    write_pngs(tmp_path / "set" / "val", per_class=2, seed=1)
    data = load_data(folder_config(tmp_path / "set"))
    assert (len(data.train), len(data.test)) == (15, 6)


def test_accumulated_equals_one_big_batch_on_an_image_folder_with_a_partial_last_window(tmp_path):
    """30 images, 24 to train: windows of 16, the last one 8 (two micro-batches of 4 where k = 4)."""
    root = write_pngs(tmp_path / "shapes", per_class=10)
    params = []
    for b, k in ((4, 4), (16, 1)):
        engine = Engine(folder_config(root, micro_batch_size=b, accum_steps=k, epochs=2, optimizer="sgd", lr=0.1))
        engine.run(NullSink())
        params.append(torch.cat([p.detach().flatten() for p in engine.model.parameters()]))
    torch.testing.assert_close(params[0], params[1], rtol=0, atol=1e-6)


@pytest.mark.parametrize("layout, words", [
    ("missing", "is not a directory"),
    ("empty", "holds no images in class folders"),
    ("one class", "has 1 class folder: a classifier needs at least 2"),
    ("not an image", "cannot be read"),
])
def test_a_folder_that_cannot_be_used_is_one_line_naming_data_dir(tmp_path, capsys, layout, words):
    root = tmp_path / "set"
    if layout == "empty":
        (root / "cats").mkdir(parents=True)
    elif layout == "one class":
        write_pngs(tmp_path / "all", per_class=3)
        root.mkdir()
        (tmp_path / "all" / "circle").rename(root / "circle")
    elif layout == "not an image":
        write_pngs(root, per_class=3)
        (root / "cross" / "001.png").write_bytes(b"not a png at all")
    with pytest.raises(DataError, match=words):
        load_data(folder_config(root))
    code = main(["run", "--model", "mlp", "--dataset", "imagefolder", "--data-dir", str(root), "--device", "cpu",
                 "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "runs").exists()


def test_the_train_page_describes_an_image_folder_and_trains_on_it(tmp_path, runs_dir):
    from streamlit.testing.v1 import AppTest

    from dashboard import server
    from gaccum_core.states import RunState

    root = write_pngs(tmp_path / "shapes", per_class=10)
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app_pages/1_Train.py"), default_timeout=120).run()
    at.selectbox(key="cfg_model").select("mlp")
    at.selectbox(key="cfg_dataset").select("imagefolder").run()
    at.text_input(key="cfg_data_dir").input(str(root)).run()
    assert any("at most 24, the size of the imagefolder training set" in e.value for e in at.error)  # b = 32
    at.number_input(key="cfg_micro_batch_size").set_value(4)
    at.number_input(key="cfg_epochs").set_value(1).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("imagefolder: 24 train / 6 test, 3×12×12, 3 classes (circle, cross, square)" in c.value
               for c in at.sidebar.caption), [c.value for c in at.sidebar.caption]
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    assert server.get_runner().wait(run_id, timeout=120).state == RunState.FINISHED
    metrics = server.get_runner().store.read_metrics(run_id)  # one epoch: a window of 16, then the partial one of 8
    assert metrics["samples"].tolist() == [16, 8]

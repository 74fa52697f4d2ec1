"""AppTest for the Equivalence page's data and batch controls: your image folder reached through its Data
directory, a refused setting named under its control, b and k typed as on the Train page."""

from pathlib import Path

from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.element_tree import Block

from images import write_pngs

ROOT = Path(__file__).resolve().parents[2]


def page() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app_pages/3_Equivalence.py"), default_timeout=180).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def under(at: AppTest, key: str) -> str | None:
    """The error drawn right after the control with this key, or None."""
    nodes = [node for node in at.main if not isinstance(node, Block)]
    (index,) = [i for i, node in enumerate(nodes) if getattr(node, "key", None) == key]
    following = nodes[index + 1] if index + 1 < len(nodes) else None
    return following.value if following is not None and following.type == "error" else None


def test_the_equivalence_page_compares_on_your_image_folder(runs_dir, tmp_path):
    folder = write_pngs(tmp_path / "shapes", per_class=8)  # 24 images of 12×12: 20 train, 4 test
    at = page()
    at.selectbox(key="eq_dataset").select("imagefolder").run()
    at.text_input(key="eq_data_dir").input(str(folder)).run()
    at.number_input(key="eq_image_size").set_value(8)
    at.number_input(key="eq_micro_batch_size").set_value(2)
    at.number_input(key="eq_accum_steps").set_value(3)
    at.number_input(key="eq_steps").set_value(2).run()
    assert not at.error, [e.value for e in at.error]
    at.button(key="eq_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "equal up to float rounding" in at.success[0].value
    assert at.session_state["eq_report"].table["numel"].iloc[0] == 64 * 3 * 8 * 8  # the mlp's 64 units, each on 8×8 RGB


def test_a_data_directory_that_is_not_one_is_refused_under_its_control(runs_dir, tmp_path):
    at = page()
    at.selectbox(key="eq_dataset").select("imagefolder").run()
    at.text_input(key="eq_data_dir").input(str(tmp_path / "missing")).run()
    message = under(at, "eq_data_dir")
    assert message is not None and "is not a directory" in message and str(tmp_path / "missing") in message
    assert not [b for b in at.button if b.key == "eq_run"]  # nothing to compare
    at.selectbox(key="eq_dataset").select("mnist").run()  # the built-in image sets likewise, with Download
    assert at.text_input(key="eq_data_dir").value == str(tmp_path / "missing")
    assert under(at, "eq_data_dir") is not None and not at.checkbox(key="eq_download").value


def test_b_and_k_are_typed_and_a_refused_one_is_named_under_its_box(runs_dir):
    at = page()
    assert not at.slider, [s.key for s in at.slider]
    assert at.number_input(key="eq_micro_batch_size").value == 8 and at.number_input(key="eq_accum_steps").value == 4
    at.number_input(key="eq_micro_batch_size").set_value(300).run()  # past the old slider's 256: typed, and it runs
    assert not at.error and "Effective batch b·k = 1200" in [c.value for c in at.caption]
    at.number_input(key="eq_accum_steps").set_value(0).run()
    message = under(at, "eq_accum_steps")
    assert message is not None and message.startswith("Accumulation steps k = 0 is not allowed"), message
    assert not [b for b in at.button if b.key == "eq_run"]

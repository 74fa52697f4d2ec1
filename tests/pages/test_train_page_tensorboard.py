"""The Train page's Output section (issue 34): TensorBoard event files on by default, off for the next run."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from gaccum_core.states import RunState

TRAIN = str(Path(__file__).resolve().parents[2] / "app_pages/1_Train.py")


def _started(at: AppTest) -> str:
    at.button(key="start").click().run()
    from dashboard import server

    run_id = at.session_state["session_runs"][-1]
    assert server.get_runner().wait(run_id, timeout=120).state == RunState.FINISHED
    return run_id


def test_a_run_started_on_the_train_page_writes_tb_unless_it_is_turned_off(runs_dir):
    at = AppTest.from_file(TRAIN, default_timeout=120).run()
    at.selectbox(key="cfg_model").select("mlp")
    at.number_input(key="cfg_max_steps").set_value(2)
    box = at.radio(key="cfg_tensorboard")
    assert box.value == "on" and box.label == "TensorBoard event files (tb/ in the run's folder)"
    first = _started(at.run())
    assert list((runs_dir / first / "tb").glob("events.out.tfevents.*"))
    at.radio(key="cfg_tensorboard").set_value("off").run()
    second = _started(at)
    assert '"tensorboard": "off"' in (runs_dir / second / "config.json").read_text()
    assert not (runs_dir / second / "tb").exists()
    assert not at.exception

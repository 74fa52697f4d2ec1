"""Resume from the dashboard: the Runs page's Resume button, and the Train page's for the session's latest run."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from gaccum_core.config import RunConfig
from gaccum_core.states import RunState

ROOT = Path(__file__).resolve().parents[2]
CONFIG = RunConfig(device="cpu", model="mlp", micro_batch_size=8, accum_steps=4, max_steps=8)


def _runner():
    from dashboard import server

    return server.get_runner()


def _stopped_mid_window(gate) -> str:
    gate.hold(step=3, micro=1)
    run_id = _runner().submit(CONFIG)
    gate.wait_until_held()
    _runner().stop(run_id)
    gate.release()
    assert _runner().wait(run_id, timeout=120).state == RunState.STOPPED
    return run_id


def test_the_runs_page_resumes_a_stopped_run_to_its_end(runs_dir, gate):
    """Select a stopped run, press Resume: it finishes in its own directory with every step once."""
    run_id = _stopped_mid_window(gate)
    at = AppTest.from_file(str(ROOT / "app_pages/2_Runs.py"), default_timeout=60).run()
    at.multiselect(key="runs_selected").select(run_id).run()
    at.button(key=f"resume_{run_id}").click().run()
    assert not at.exception and not at.error
    assert any("Resumed" in s.value for s in at.success)
    snapshot = _runner().wait(run_id, timeout=120)
    assert snapshot.state == RunState.FINISHED
    assert _runner().store.read_metrics(run_id)["step"].tolist() == list(range(1, 9))
    at.run()
    assert not [b for b in at.button if b.key == f"resume_{run_id}"]  # finished: nothing left to resume


def test_the_runs_page_says_why_a_run_cannot_resume(runs_dir, gate):
    """A stopped run whose checkpoint is gone: the page names the reason instead of a Resume that cannot work
    (issue 40; a checkpoint that does not load is said when Resume is pressed: test_new_user_pages)."""
    run_id = _stopped_mid_window(gate)
    _runner().store.checkpoint_path(run_id).unlink()
    at = AppTest.from_file(str(ROOT / "app_pages/2_Runs.py"), default_timeout=60).run()
    at.multiselect(key="runs_selected").select(run_id).run()
    assert not at.exception
    assert not [b for b in at.button if b.key == f"resume_{run_id}"]
    assert any(f"Run {run_id} cannot be resumed: it has no checkpoint.pt" in c.value for c in at.caption)


def test_the_train_page_resumes_the_sessions_stopped_run(runs_dir, gate):
    """Start, Stop mid-window, Resume on the Train page: the same run finishes."""
    at = AppTest.from_file(str(ROOT / "app_pages/1_Train.py"), default_timeout=120).run()
    at.selectbox(key="cfg_model").select("mlp")
    at.number_input(key="cfg_max_steps").set_value(8).run()
    gate.hold(step=2, micro=1)
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    gate.wait_until_held()
    _runner().stop(run_id)
    gate.release()
    assert _runner().wait(run_id, timeout=120).state == RunState.STOPPED
    at.run()
    at.button(key="resume").click().run()
    assert not at.exception
    assert _runner().wait(run_id, timeout=120).state == RunState.FINISHED
    assert _runner().store.read_metrics(run_id)["step"].tolist() == list(range(1, 9))

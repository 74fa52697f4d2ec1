"""Issue 40, a new user's defects on the Train, Runs and Sweeps pages: Resume offered only where it can work (else
why not), a run that failed before its first step said once instead of empty charts, runs linked by a repeated
?run=, the Sweeps page's settings in its URL, the weights a run started from, and a fresh Train tab's Resume."""

import shutil
from pathlib import Path

import torch
from streamlit.testing.v1 import AppTest

from gaccum_core import faults
from gaccum_core.config import RunConfig
from gaccum_core.states import RunState
from page_charts import live_figures

ROOT = Path(__file__).resolve().parents[2]
TRAIN = str(ROOT / "app_pages/1_Train.py")
RUNS = str(ROOT / "app_pages/2_Runs.py")
SWEEPS = str(ROOT / "app_pages/6_Sweeps.py")
CONFIG = RunConfig(device="cpu", model="mlp", micro_batch_size=8, accum_steps=2, max_steps=3)


def _runner():
    from dashboard import server

    return server.get_runner()


def _page(path: str, query_params: dict | None = None) -> AppTest:
    at = AppTest.from_file(path, default_timeout=120)
    at.query_params = dict(query_params or {})
    return at.run()


def _failed_on_disk(message: str) -> str:
    """A run that failed before its first step, as its files say (no rows, no checkpoint.pt)."""
    store = _runner().store
    run_id = store.create(CONFIG)
    store.update_status(run_id, state=RunState.FAILED, message=message)
    return run_id


def test_the_train_page_says_once_why_its_run_failed_before_a_step_and_offers_no_resume(runs_dir):
    at = _page(TRAIN)
    at.selectbox(key="cfg_model").select("mlp")
    at.number_input(key="cfg_max_steps").set_value(3).run()
    faults.arm(faults.Fault("error", step=1))
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    assert _runner().wait(run_id, timeout=60).state == RunState.FAILED
    at.run()
    assert not at.exception
    assert "resume" not in [b.key for b in at.button]  # it has no checkpoint.pt
    assert any(f"Run {run_id} cannot be resumed: it has no checkpoint.pt" in c.value for c in at.caption)
    said = [m.value for m in [*at.error, *at.caption, *at.info, *at.warning] if "injected fault" in m.value]
    assert len(said) == 1, said
    assert live_figures(at) == {}  # no frame waiting for a first step that never comes
    assert any(c.value == "Initial weights: initialised with the run's seed" for c in at.caption)


def test_the_runs_page_says_why_a_run_failed_before_a_step_instead_of_charts_and_resume(runs_dir):
    run_id = _failed_on_disk("RuntimeError: CUDA error at step 1")
    at = _page(RUNS, {"run": run_id})
    assert not at.exception
    assert not [b for b in at.button if b.key == f"resume_{run_id}"]
    assert any(f"Run {run_id} cannot be resumed: it has no checkpoint.pt" in c.value for c in at.caption)
    assert not at.get("plotly_chart")
    said = [c.value for c in at.caption if "CUDA error" in c.value]
    assert len(said) == 1 and "ended before its first optimizer step (failed: RuntimeError" in said[0], said


def test_a_run_whose_config_does_not_read_offers_no_resume_and_says_why(runs_dir, finished_run):
    shutil.copytree(finished_run, runs_dir / finished_run.name)
    store = _runner().store
    store.update_status(finished_run.name, state=RunState.STOPPED)
    (runs_dir / finished_run.name / "config.json").write_text('{"model": "mlp", "lr": 0}')
    from gaccum_core.execution.resume import resume_refusal

    refused = resume_refusal(store, finished_run.name)
    assert refused is not None and "config.json cannot be read" in refused and "lr" in refused, refused


def test_runs_linked_by_a_repeated_or_comma_separated_parameter_are_all_selected(runs_dir):
    store = _runner().store
    first, second, third = (store.create(CONFIG.replace(seed=seed)) for seed in range(3))
    at = _page(RUNS, {"run": [first, f"{second},{third}"]})
    assert not at.exception
    assert sorted(at.multiselect(key="runs_selected").value) == sorted([first, second, third])


def test_the_sweeps_pages_settings_survive_a_reload_and_a_bad_link_value_is_named(runs_dir):
    at = _page(SWEEPS)
    at.multiselect(key="sweep_micro_batch_size").set_value([4, 16])
    at.multiselect(key="sweep_amp").set_value(["off", "bf16"])
    at.number_input(key="sweep_epochs").set_value(2)
    at.text_input(key="sweep_lr").input("0.01")
    at.checkbox(key="sweep_same_seed").check()
    at.run()
    link = dict(at.query_params)
    assert link == {"micro_batch_size": "4,16", "amp": "off,bf16", "epochs": "2", "lr": "0.01", "same_seed": "true"}
    again = _page(SWEEPS, link)
    assert not again.exception and not again.sidebar.warning
    assert again.multiselect(key="sweep_micro_batch_size").value == [4, 16]
    assert again.multiselect(key="sweep_amp").value == ["off", "bf16"]
    assert again.number_input(key="sweep_epochs").value == 2 and again.text_input(key="sweep_lr").value == "0.01"
    assert again.checkbox(key="sweep_same_seed").value is True
    bad = _page(SWEEPS, {"micro_batch_size": ["8", "7"], "repeats": "two", "model": "gpt9"})
    warnings = [w.value for w in bad.sidebar.warning]
    for words in ("Micro-batch sizes b = 7 is not offered", "Repeats per cell = 'two'", "Model = gpt9 is not offered"):
        assert any(words in w and "not used" in w for w in warnings), (words, warnings)
    assert bad.multiselect(key="sweep_micro_batch_size").value == [8]  # the good value is kept
    assert bad.selectbox(key="sweep_model").value == "cnn" and bad.number_input(key="sweep_repeats").value == 3


def test_a_fresh_train_tab_offers_resume_of_the_latest_stopped_run_and_names_its_weights(runs_dir, finished_run):
    shutil.copytree(finished_run, runs_dir / finished_run.name)
    run_id, store = finished_run.name, _runner().store
    weights = "weights loaded from good.pth (sha256 0123abcd), fc reset to 3 classes"
    store.update_status(run_id, state=RunState.STOPPED, message="stopped by the user", weights=weights)
    at = _page(TRAIN)
    assert not at.exception and not [i for i in at.info if "No run yet" in i.value]
    assert any(c.value == f"Initial weights: {weights}" for c in at.caption), [c.value for c in at.caption]
    assert "step 2 of 2" in " ".join(p.proto.text for p in at.get("progress"))
    at.button(key="resume").click().run()
    assert not at.exception and not at.error
    assert _runner().wait(run_id, timeout=60).state == RunState.FINISHED


def test_the_runs_page_still_says_a_checkpoint_load_error_when_resume_is_pressed(runs_dir, finished_run):
    shutil.copytree(finished_run, runs_dir / finished_run.name)
    run_id, store = finished_run.name, _runner().store
    store.update_status(run_id, state=RunState.STOPPED)
    torch.save([1, 2], store.checkpoint_path(run_id))  # a whole torch file, but no gaccum checkpoint
    at = _page(RUNS, {"run": run_id})
    at.button(key=f"resume_{run_id}").click().run()
    assert not at.exception
    assert any(f"Cannot resume {run_id}" in e.value and "holds a list" in e.value for e in at.error), at.error

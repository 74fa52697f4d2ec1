"""The Sweeps page: build a grid from the controls, start it, follow it, read the table and the verdicts."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = str(ROOT / "app_pages/6_Sweeps.py")


def sweeps_page() -> AppTest:
    return AppTest.from_file(SWEEPS, default_timeout=120).run()


def _wait_for_the_sweep(at: AppTest) -> None:
    from dashboard.sweep_jobs import sweep_jobs

    for job in sweep_jobs().going():
        assert job.wait(300), "the sweep did not end"
    at.run()


def test_a_grid_built_on_the_page_runs_and_its_table_and_verdicts_show(runs_dir, downloads):
    at = sweeps_page()
    assert not at.exception
    at.selectbox(key="sweep_model").select("mlp")
    at.number_input(key="sweep_epochs").set_value(2)
    at.number_input(key="sweep_effective_batch").set_value(32)
    at.multiselect(key="sweep_micro_batch_size").set_value([8, 16])
    at.number_input(key="sweep_repeats").set_value(1)
    at.run()
    assert not at.exception
    caption = " ".join(c.value for c in at.caption)
    assert "mlp on digits, E=32: b × reduction, 1 repeat (4 runs)" in caption, caption
    at.button(key="sweep_start").click().run()
    _wait_for_the_sweep(at)
    assert not at.exception
    table = at.dataframe[0].value
    assert list(table["cell"]) == ["b=8 k=4 reduction=mean", "b=8 k=4 reduction=mean_per_micro_batch",
                                   "b=16 k=2 reduction=mean", "b=16 k=2 reduction=mean_per_micro_batch"]
    assert list(table["runs"]) == ["1/1"] * 4
    assert [c.startswith("yes") for c in table["coincides"]] == [True, False, True, False]
    assert any("coincide, as exact accumulation promises" in s.value for s in at.success)
    assert any("do not coincide" in i.value and "partial window" in i.value for i in at.info)
    sweep_id = next(iter((runs_dir / "sweeps").iterdir())).name
    assert (runs_dir / "sweeps" / sweep_id / "summary.csv").is_file()
    assert f"sweep-{sweep_id}-summary.csv" in downloads
    assert len(at.get("plotly_chart")) == 3
    first_cell = [d.name for d in runs_dir.iterdir() if d.name.endswith(f"sweep-{sweep_id}-c0-r0")]
    assert any(f"(Runs?run={first_cell[0]})" in m.value for m in at.markdown)  # the cell's runs, on the Runs page


def test_refused_values_are_named_by_their_control_and_disable_start(runs_dir):
    at = sweeps_page()
    at.number_input(key="sweep_repeats").set_value(0).run()
    assert at.button(key="sweep_start").disabled
    assert any("Repeats per cell = 0 is not allowed" in e.value for e in at.error)
    at.number_input(key="sweep_repeats").set_value(1)
    at.multiselect(key="sweep_reduction").set_value([]).run()
    assert at.button(key="sweep_start").disabled
    assert any("Loss reductions is empty: choose one or more values" in e.value for e in at.error)
    assert not (runs_dir / "sweeps").exists()


def test_stop_ends_the_sweep_after_its_run_in_progress_and_start_goes_on_from_there(runs_dir, gate):
    from dashboard.sweep_jobs import sweep_jobs

    at = sweeps_page()
    at.selectbox(key="sweep_model").select("mlp")
    at.number_input(key="sweep_max_steps").set_value(2)
    at.number_input(key="sweep_repeats").set_value(1)
    at.run()
    gate.hold(step=1)
    at.button(key="sweep_start").click().run()
    gate.wait_until_held()
    (job,) = sweep_jobs().going()
    at.run()
    assert any("0 of 4 runs done" in p.proto.text for p in at.get("progress"))
    at.button(key=f"sweep_stop_{job.sweep_id}").click().run()
    gate.release()
    assert job.wait(120)
    assert job.progress().state == "stopped"
    stopped = [d for d in runs_dir.iterdir() if d.name != "sweeps" and d.is_dir()]
    assert len(stopped) == 1  # no run started after Stop
    at.run()
    at.button(key="sweep_start").click().run()
    _wait_for_the_sweep(at)
    runs = [d for d in runs_dir.iterdir() if d.name != "sweeps" and d.is_dir()]
    assert len(runs) == 4 and stopped[0] in runs  # the stopped run went on from its checkpoint, in its directory
    assert list(at.dataframe[0].value["runs"]) == ["1/1"] * 4


def test_a_runs_directory_that_cannot_take_the_sweep_is_said_so(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("GACCUM_RUNS_DIR", str(blocked))
    at = sweeps_page()
    at.selectbox(key="sweep_model").select("mlp").run()
    at.button(key="sweep_start").click().run()
    assert not at.exception
    assert any(e.value.startswith("Cannot start:") and "GACCUM_RUNS_DIR" in e.value for e in at.error)


def test_the_same_sweep_going_in_another_process_is_said_so_under_start(runs_dir, monkeypatch):
    """A second start of a sweep that a command line (or another server) is running is refused in one line
    naming that process, not a traceback (issue 29 E)."""
    from gaccum_core.runs.claim import RunBusyError
    from gaccum_core.sweeps.job import SweepJob

    def owned(self):
        raise RunBusyError(f"sweep {self.sweep_id} is owned by process 4242 (python -m gaccum_core sweep): another "
                           "server or command line is running it; stop it there first")

    monkeypatch.setattr(SweepJob, "start", owned)
    at = sweeps_page()
    at.selectbox(key="sweep_model").select("mlp").run()
    at.button(key="sweep_start").click().run()
    assert not at.exception, [e.value for e in at.exception]
    (message,) = [e.value for e in at.error if e.value.startswith("Cannot start:")]
    assert "owned by process 4242" in message and "\n" not in message


def test_a_text_sweep_crosses_packing_with_the_reductions(runs_dir):
    at = sweeps_page()
    assert "sweep_packing" not in [m.key for m in at.multiselect]  # cnn on digits: nothing to pack
    at.selectbox(key="sweep_model").select("gpt")
    at.selectbox(key="sweep_dataset").select("pydoc").run()
    at.multiselect(key="sweep_packing").set_value(["off", "on"]).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    caption = " ".join(c.value for c in at.caption)
    assert "gpt on pydoc, E=64: b × reduction × packing, 3 repeats (24 runs)" in caption, caption
    at.selectbox(key="sweep_dataset").select("digits").run()  # an image data set: no packing to cross
    assert "sweep_packing" not in [m.key for m in at.multiselect]


def test_a_pg_sweep_crosses_the_loss_aggregations_and_sft_is_offered_its_own(runs_dir):
    at = sweeps_page()
    at.selectbox(key="sweep_model").select("gpt")
    at.selectbox(key="sweep_dataset").select("pg").run()
    modes = at.multiselect(key="sweep_loss_agg")
    assert modes.options[-1] == "group-mean-token-mean"
    modes.set_value(["token-mean", "group-mean-token-mean"]).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    caption = " ".join(c.value for c in at.caption)
    assert "gpt on pg, E=64: b × reduction × loss\\_agg, 3 repeats (24 runs)" in caption, caption  # markdown-escaped
    at.selectbox(key="sweep_dataset").select("sft").run()  # no prompt groups: pg's mode leaves the pick
    assert "group-mean-token-mean" not in at.multiselect(key="sweep_loss_agg").options
    assert at.multiselect(key="sweep_loss_agg").value == ["token-mean"] and not at.error


def test_a_sweep_crosses_activation_checkpointing_with_the_micro_batch(runs_dir):
    at = sweeps_page()
    assert at.multiselect(key="sweep_activation_checkpointing").value == ["off"]
    at.multiselect(key="sweep_activation_checkpointing").set_value(["off", "full"]).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    caption = " ".join(c.value for c in at.caption)
    assert "cnn on digits, E=64: b × reduction × checkpointing, 3 repeats (24 runs)" in caption, caption


def test_a_failed_run_is_named_its_cell_marked_and_a_second_start_trains_only_it(runs_dir):
    """Issue 33: a run that failed at its first step is named with its message above the table, its cell's
    figures say they come from 1 of 2 runs, and each rerun (the button, then Start) trains only the failed run."""
    from gaccum_core import faults

    at = sweeps_page()
    at.selectbox(key="sweep_model").select("mlp")
    at.number_input(key="sweep_max_steps").set_value(2)
    at.multiselect(key="sweep_micro_batch_size").set_value([8])
    at.multiselect(key="sweep_reduction").set_value(["mean"])
    at.number_input(key="sweep_repeats").set_value(2)
    at.run()
    faults.arm(faults.Fault("error", step=1))  # the sweep's first run fails at its first step; the second trains
    try:
        at.button(key="sweep_start").click().run()
        _wait_for_the_sweep(at)
    finally:
        faults.disarm()
    assert not at.exception
    sweep_id = next(iter((runs_dir / "sweeps").iterdir())).name
    (failed,) = [d.name for d in runs_dir.iterdir() if d.name.endswith(f"sweep-{sweep_id}-c0-r0")]
    (finished,) = [d for d in runs_dir.iterdir() if d.name.endswith(f"sweep-{sweep_id}-c0-r1")]
    (warning,) = [w.value for w in at.warning]
    assert f"is incomplete, its figures from 1 of 2 runs: {failed} failed: " in warning and "injected fault" in warning
    table = at.dataframe[0].value
    assert list(table["runs"]) == ["1/2, 1 failed"] and table["final loss"][0].endswith(" · from 1 of 2 runs")

    kept = (finished / "metrics.csv").read_bytes()
    faults.arm(faults.Fault("error", step=1))  # the rerun fails again: named again
    try:
        at.button(key=f"sweep_rerun_{sweep_id}").click().run()
        _wait_for_the_sweep(at)
    finally:
        faults.disarm()
    assert list(at.dataframe[0].value["runs"]) == ["1/2, 1 failed"] and len(at.warning) == 1
    at.button(key="sweep_start").click().run()  # Start again, with the same settings
    _wait_for_the_sweep(at)
    assert not at.exception and not at.warning
    assert list(at.dataframe[0].value["runs"]) == ["2/2"]
    assert (finished / "metrics.csv").read_bytes() == kept  # the finished run was not trained again
    attempts = [d for d in runs_dir.iterdir() if d.name.endswith(f"sweep-{sweep_id}-c0-r0")]
    assert len(attempts) == 3  # two failed attempts kept for their owner to read, and the one that finished


def test_more_axes_cross_the_learning_rate_and_the_optimizer_and_a_bad_value_names_its_box(runs_dir):
    """Issue 42: each field a sweep may cross has an axis, generated from its metadata: under More axes, a box of
    comma-separated numbers (parsed as the sweep command's flag is) or a multiselect of its choices. A grid of the
    axes the page had before keeps its order, so its sweep id (a rerun finds the runs done)."""
    from gaccum_core.config import DEFAULT_RUN
    from gaccum_core.sweeps.spec import SweepSpec

    at = sweeps_page()
    (more,) = [e for e in at.sidebar.expander if e.label == "More axes"]
    assert more.text_input(key="sweep_lr").value == "0.05" and more.multiselect(key="sweep_optimizer").value == ["sgd"]
    assert "sweep_device" not in [w.key for w in at.sidebar.text_input]  # where a run runs: not an axis
    at.selectbox(key="sweep_model").select("gpt")
    at.selectbox(key="sweep_dataset").select("pydoc").run()
    at.multiselect(key="sweep_activation_checkpointing").set_value(["off", "full"])
    at.multiselect(key="sweep_packing").set_value(["off", "on"]).run()  # declared before AC, drawn after it
    before = SweepSpec((("micro_batch_size", (8, 32)), ("reduction", ("mean", "mean_per_micro_batch")),
                        ("activation_checkpointing", ("off", "full")), ("packing", ("off", "on"))),
                       tuple({**DEFAULT_RUN.to_dict(), "model": "gpt", "dataset": "pydoc", "epochs": 3}.items()),
                       3, False, 64)
    assert f"sweep {before.sweep_id} " in " ".join(c.value for c in at.caption)  # the page's grid order of old
    at.selectbox(key="sweep_model").select("cnn")
    at.selectbox(key="sweep_dataset").select("digits")
    at.multiselect(key="sweep_activation_checkpointing").set_value(["off"])
    at.text_input(key="sweep_lr").input("0.01, 0.05")
    at.multiselect(key="sweep_optimizer").set_value(["sgd", "adamw"]).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    caption = " ".join(c.value for c in at.caption)
    assert "cnn on digits, E=64: b × reduction × optimizer × lr, 3 repeats (48 runs)" in caption, caption
    assert (at.query_params["lr"], at.query_params["optimizer"]) == ("0.01, 0.05", "sgd,adamw")
    at.text_input(key="sweep_lr").input("0.01,,x").run()
    assert at.button(key="sweep_start").disabled
    (error,) = [e.value for e in at.error]
    assert error == ("Cannot start: Learning rate = '0.01,,x' is not allowed: one or more comma-separated values, "
                     "none empty")
    assert not (runs_dir / "sweeps").exists()

"""The FSDP traps: a 2-process gloo job started by the lab; each trap lands off one big batch, the engine's FSDP
run and each written fix do not, and no rank outlives the call (done, failed or timed out)."""

import os

import psutil
import pytest

from gaccum_core.config import ConfigError
from gaccum_core.lab.pitfalls.catalog import FSDP_PITFALLS, setup_words
from gaccum_core.lab.pitfalls.fsdp_job import FsdpJobError, run_fsdp_pitfalls
from gaccum_core.lab.pitfalls import fsdp_job

AVERAGED, ROOT_ONLY, RESHARD_OFF = FSDP_PITFALLS
STEPS = 4


def _ranks_of_ours() -> list[psutil.Process]:
    """This test process's children (and theirs) that run a rank of the FSDP job."""
    found = []
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if fsdp_job.RANK_MODULE in " ".join(child.cmdline()):
                found.append(child)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.fixture(scope="module")
def gallery():
    return run_fsdp_pitfalls(STEPS)


@pytest.mark.multiprocess
@pytest.mark.parametrize("key", list(FSDP_PITFALLS))
def test_each_trap_is_off_the_big_batch_and_the_engine_is_not(gallery, key):
    frame = gallery.results[key].frame
    assert frame["step"].tolist() == list(range(1, STEPS + 1))
    assert frame["distance_correct"].max() < 1e-5  # the engine's FSDP run is one big batch, to rounding
    assert gallery.results[key].final_distance_pitfall > 1e-3
    assert gallery.results[key].final_distance_pitfall > 100 * frame["distance_correct"].max()


@pytest.mark.multiprocess
def test_averaged_gradients_are_one_over_the_ranks_and_drift_from_the_first_step(gallery):
    frame = gallery.results[AVERAGED].frame
    assert gallery.first_step_grad_ratio == pytest.approx(1 / fsdp_job.RANKS, rel=1e-4)  # same weights at step 1
    assert frame["distance_pitfall"].iloc[0] > 1e-3
    assert frame["distance_pitfall"].is_monotonic_increasing


@pytest.mark.multiprocess
def test_a_divide_factor_on_a_root_without_parameters_changes_nothing_and_gloo_refuses_it_on_every_unit(gallery):
    averaged, root_only = gallery.results[AVERAGED].frame, gallery.results[ROOT_ONLY].frame
    assert root_only["distance_pitfall"].tolist() == averaged["distance_pitfall"].tolist()
    assert root_only["grad_norm_ratio"].tolist() == averaged["grad_norm_ratio"].tolist()
    assert "PREMUL_SUM" in gallery.premul_sum_error and "Gloo" in gallery.premul_sum_error
    assert gallery.fix_distances[ROOT_ONLY] < 1e-5  # on every unit with sum-only collectives: the big batch


@pytest.mark.multiprocess
def test_reshard_off_at_the_step_hides_the_grads_and_the_next_forward_uses_stale_weights(gallery):
    frame = gallery.results[RESHARD_OFF].frame
    assert gallery.grad_none_at_step and not gallery.grad_none_after_reshard
    assert frame["distance_pitfall"].iloc[0] < 1e-5  # the first step is right: its forwards were fresh
    assert frame["distance_pitfall"].iloc[1] > 1e-4  # the second window's first forward was not
    assert gallery.fix_distances[RESHARD_OFF] < 1e-5  # every unit resharded before the step: the big batch


@pytest.mark.multiprocess
def test_the_job_leaves_no_rank_behind(gallery):
    assert _ranks_of_ours() == []


@pytest.mark.multiprocess
def test_a_job_out_of_time_is_ended_with_a_clear_message():
    with pytest.raises(FsdpJobError, match=r"did not finish within 0\.5 s.*both processes were ended"):
        run_fsdp_pitfalls(1, timeout_s=0.5)
    assert _ranks_of_ours() == []


@pytest.mark.multiprocess
def test_a_failing_rank_is_named_with_its_last_words(monkeypatch):
    monkeypatch.setattr(fsdp_job, "RANK_MODULE", "gaccum_core.lab.pitfalls.no_such_rank")
    with pytest.raises(FsdpJobError, match=r"rank \d exited with status 1: .*No module named"):
        run_fsdp_pitfalls(1)
    assert _ranks_of_ours() == []


@pytest.mark.parametrize("field,value", [("steps", 0), ("nproc", 4), ("sharding", "ddp"), ("device", "cuda"),
                                         ("fsdp_reshard_after_backward", "on"), ("lr", -1.0)])
def test_bad_settings_name_their_field_before_any_process_starts(field, value):
    with pytest.raises(ConfigError) as info:
        run_fsdp_pitfalls(value) if field == "steps" else run_fsdp_pitfalls(**{field: value})
    assert info.value.field == field and field in str(info.value)
    assert _ranks_of_ours() == []


def test_a_text_model_is_refused_by_its_data_set():
    with pytest.raises(ConfigError, match="dataset='pydoc' is not allowed: an image data set"):
        run_fsdp_pitfalls(model="gpt", dataset="pydoc")


def test_each_fsdp_case_says_it_runs_on_two_gloo_processes():
    for key, case in FSDP_PITFALLS.items():
        words = setup_words(key)
        assert "2 gloo processes" in words and "a window of 64 samples" in words, words
        assert len(case.explanation.splitlines()) == 2 and "\n" not in case.fix
    assert "reshard_after_backward off" in setup_words(RESHARD_OFF)
    assert "reshard_after_backward off" not in setup_words(AVERAGED)


@pytest.mark.multiprocess
def test_the_pitfall_page_shows_the_job_s_figures_and_exports_them(gallery, runs_dir, downloads, monkeypatch):
    """The page's FSDP section on this module's job (the page's own call returns it: one job for the file)."""
    from pathlib import Path

    import pandas as pd
    from streamlit.testing.v1 import AppTest

    from gaccum_core.lab.pitfalls.catalog import PITFALLS

    monkeypatch.setattr(fsdp_job, "run_fsdp_pitfalls", lambda steps: gallery)
    page = Path(__file__).resolve().parents[2] / "app_pages/4_Pitfalls.py"
    at = AppTest.from_file(str(page), default_timeout=120).run()
    assert any(h.value == "FSDP (2 processes)" for h in at.header)
    first = len(PITFALLS) + 1
    titles = [s.value for s in at.subheader]
    assert titles[first - 1:first + 2] == [f"{first + i}. {case.title}" for i, case in enumerate(FSDP_PITFALLS.values())]
    at.button(key="pitfalls_fsdp_run").click().run()
    assert not at.exception and not at.error
    assert [c.key for c in at.get("plotly_chart")] == [f"pitfall_{key}" for key in FSDP_PITFALLS]
    shown = " ".join(m.value for m in at.markdown)
    assert "Cannot use ReduceOp.PREMUL_SUM with Gloo" in shown and "None on every one" in shown
    frame = pd.read_csv(pd.io.common.BytesIO(downloads["gaccum-pitfalls-fsdp.csv"]))
    assert list(frame["pitfall"].unique()) == list(FSDP_PITFALLS)
    assert (frame.groupby("pitfall")["distance_correct"].max() < 1e-5).all()
    assert (frame.groupby("pitfall")["distance_pitfall"].max() > 1e-3).all()

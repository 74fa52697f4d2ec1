"""The Train page's Processes control: a data-parallel run from the page, and values the machine cannot run."""

import os
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from gaccum_core.states import RunState

TRAIN = str(Path(__file__).resolve().parents[2] / "app_pages/1_Train.py")


def _runner():
    from dashboard import server

    return server.get_runner()


def _page() -> AppTest:
    at = AppTest.from_file(TRAIN, default_timeout=120).run()
    at.selectbox(key="cfg_model").select("mlp")
    at.number_input(key="cfg_micro_batch_size").set_value(8)
    at.number_input(key="cfg_accum_steps").set_value(2)
    return at.run()


@pytest.mark.multiprocess
def test_two_processes_from_the_train_page_train_one_run_of_effective_batch_n_b_k(runs_dir):
    """N=2: the page shows N·b·k, Start runs DDP under torchrun, every row says world size 2."""
    at = _page()
    at.number_input(key="cfg_nproc").set_value(2).run()
    assert [m.value for m in at.metric if m.label == "Effective batch N·b·k"] == ["32"]
    assert at.checkbox(key="cfg_sync_every_micro_batch").value is False
    # One epoch of 80 fake samples, not the page's 30 epochs of digits: windows of N·b·k = 32, 32, then 16.
    at.selectbox(key="cfg_dataset").select("fake").run()
    at.number_input(key="cfg_fake_samples").set_value(80)
    at.number_input(key="cfg_epochs").set_value(1).run()
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    snapshot = _runner().wait(run_id, timeout=300)
    assert snapshot.state == RunState.FINISHED, snapshot.message
    assert {row["world_size"] for row in snapshot.metrics} == {2}
    assert all(row["samples"] <= 32 for row in snapshot.metrics) and snapshot.metrics[0]["samples"] == 32
    assert [row["samples"] for row in snapshot.metrics] == [32, 32, 16]  # the partial last window too
    assert snapshot.config.nproc == 2 and snapshot.config.effective_batch_size == 32


def test_more_processes_than_cores_is_refused_under_the_control(runs_dir):
    """N above the core count (no GPU here): Start is disabled and the message names the control and the limit."""
    at = _page()
    at.number_input(key="cfg_nproc").set_value((os.cpu_count() or 1) + 1).run()
    assert at.button(key="start").disabled
    messages = [e.value for e in at.error]
    assert any("Processes N (data-parallel)" in m and f"1 to {os.cpu_count()}" in m for m in messages), messages


def test_fsdp_shows_its_own_options_and_hides_ddps(runs_dir):
    """Sharding fsdp: its sync and reshard options appear with a line on what they cost; DDP's checkbox goes."""
    at = _page()
    at.number_input(key="cfg_nproc").set_value(2).run()
    assert at.checkbox(key="cfg_sync_every_micro_batch").value is False
    assert not at.get("radio") or "cfg_fsdp_sync" not in [r.key for r in at.radio]
    at.radio(key="cfg_sharding").set_value("fsdp").run()
    assert not at.exception and not at.button(key="start").disabled
    assert "cfg_sync_every_micro_batch" not in [c.key for c in at.checkbox]
    assert at.radio(key="cfg_fsdp_sync").options == ["every micro-batch", "last micro-batch only"]
    assert at.radio(key="cfg_fsdp_reshard_after_backward").value == "on"
    help_text = at.radio(key="cfg_fsdp_sync").help  # the trade-off, in the control's help
    assert "fewer collectives" in help_text and "whole fp32 gradient" in help_text
    at.radio(key="cfg_fsdp_sync").set_value("last").run()
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert "2 times fewer collectives" in captions and "whole fp32 gradient" in captions  # k=2 on this page
    assert "set_requires_gradient_sync(last)" in at.code[-1].value  # the loop shown is FSDP's


@pytest.mark.parametrize("change,label,words", [
    ({"cfg_nproc": 1}, "Sharding = 'fsdp'", "Set Processes N to 2 or more"),
    ({"cfg_compile": "default"}, "torch.compile = 'default'", "off with sharding fsdp"),
])
def test_a_refused_fsdp_combination_is_named_under_its_control(runs_dir, change, label, words):
    """fsdp with one process, or with torch.compile: Start is disabled and the message names the control."""
    at = _page()
    at.number_input(key="cfg_nproc").set_value(2).run()
    at.radio(key="cfg_sharding").set_value("fsdp").run()
    for key, value in change.items():
        widget = at.number_input(key=key) if key == "cfg_nproc" else at.selectbox(key=key)
        (widget.set_value(value) if key == "cfg_nproc" else widget.select(value))
    at.run()
    assert not at.exception and at.button(key="start").disabled
    messages = [e.value for e in at.sidebar.error]
    assert any(m.startswith(f"{label} is not allowed") and words in m for m in messages), messages


def test_sharding_settings_survive_a_reload(runs_dir):
    """N=2, fsdp, sync last, reshard off: written to the URL, and a new session opened on it shows them."""
    at = _page()
    at.number_input(key="cfg_nproc").set_value(2).run()
    at.radio(key="cfg_sharding").set_value("fsdp").run()
    at.radio(key="cfg_fsdp_sync").set_value("last")
    at.radio(key="cfg_fsdp_reshard_after_backward").set_value("off")
    at.run()
    link = dict(at.query_params)
    assert {k: link[k] for k in ("nproc", "sharding", "fsdp_sync", "fsdp_reshard_after_backward")} == \
        {"nproc": "2", "sharding": "fsdp", "fsdp_sync": "last", "fsdp_reshard_after_backward": "off"}
    again = AppTest.from_file(TRAIN, default_timeout=120)
    again.query_params = link
    again.run()
    assert not again.exception and not again.sidebar.warning
    assert again.radio(key="cfg_sharding").value == "fsdp"
    assert again.radio(key="cfg_fsdp_sync").value == "last"
    assert again.radio(key="cfg_fsdp_reshard_after_backward").value == "off"
    assert not again.button(key="start").disabled


def test_fsdp_with_one_process_in_a_link_is_named_and_ddp_shown(runs_dir):
    at = AppTest.from_file(TRAIN, default_timeout=120)
    at.query_params = {"sharding": "fsdp"}
    at.run()
    assert not at.exception
    assert at.radio(key="cfg_sharding").value == "ddp"
    assert any("Sharding = 'fsdp'" in w.value and "not used" in w.value for w in at.sidebar.warning)

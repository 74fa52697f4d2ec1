"""The Train page as people live in it: deleted runs, refused values, reloads mid-run, skipped steps."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from page_charts import live_figures

from dashboard import run_picks
from gaccum_core.config import RunConfig
from gaccum_core.states import RunState
from gaccum_core.views.charts import CHARTS
from gaccum_core.execution.runner import Runner
from gaccum_core.runs.store import RunStore

ROOT = Path(__file__).resolve().parents[2]
TRAIN = str(ROOT / "app_pages/1_Train.py")


def runner():
    from dashboard import server

    return server.get_runner()


def train_page() -> AppTest:
    return AppTest.from_file(TRAIN, default_timeout=120).run()


def test_a_run_deleted_elsewhere_disappears_from_the_train_page_without_error(runs_dir, downloads):
    at = train_page()
    at.selectbox(key="cfg_model").select("mlp")
    at.number_input(key="cfg_max_steps").set_value(2)
    at.run()
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    assert runner().wait(run_id, timeout=120).state == RunState.FINISHED
    at.run()
    assert f"{run_id}-metrics.csv" in downloads
    runner().delete(run_id)  # what the Runs page does, in another session
    at.run()
    assert not at.exception
    assert list(at.session_state["session_runs"]) == []
    assert not live_figures(at), "the deleted run is still drawn"
    assert not any(run_id[-6:] in p.proto.text for p in at.get("progress"))
    assert not (runs_dir / run_id).exists()


def test_a_running_run_cannot_be_deleted(runs_dir, gate):
    gate.hold(step=1)
    run_id = runner().submit(RunConfig(device="cpu", model="mlp", max_steps=2))
    gate.wait_until_held()
    from gaccum_core.execution.runner import RunBusyError

    with pytest.raises(RunBusyError, match="stop it"):
        runner().delete(run_id)
    gate.release()
    runner().wait(run_id, timeout=120)
    runner().delete(run_id)
    assert not runner().knows(run_id)


@pytest.mark.parametrize("key,value,label", [
    ("cfg_lr", 0.0, "Learning rate"),
    ("cfg_micro_batch_size", 0, "Micro-batch size b"),
    ("cfg_accum_steps", -3, "Accumulation steps k"),
    ("cfg_momentum", 1.5, "Momentum"),
    ("cfg_epochs", 0, "Epochs"),
    ("cfg_checkpoint_every", -1, "Checkpoint every N steps (0 = on Stop and at the end)"),
    ("cfg_nproc", 0, "Processes N (data-parallel)"),
])
def test_a_refused_value_is_shown_named_by_its_label_and_disables_start(runs_dir, key, value, label):
    at = train_page()
    at.number_input(key=key).set_value(value).run()
    assert not at.exception
    assert at.number_input(key=key).value == value  # what the control shows is what was typed
    assert at.button(key="start").disabled
    messages = [e.value for e in at.sidebar.error]
    assert any(m.startswith(f"{label} = {value!r} is not allowed") for m in messages), messages


def test_a_reload_mid_run_shows_the_running_runs_settings(runs_dir, gate):
    config = RunConfig(device="cpu", model="mlp", micro_batch_size=16, accum_steps=3, lr=0.01, amp="bf16",
                       max_steps=2)
    gate.hold(step=1)
    run_id = runner().submit(config)
    gate.wait_until_held()
    try:
        at = reloaded({"accum_steps": "9", "lr": "0.5"})  # a new session on a link of other settings
        assert not at.exception
        assert at.selectbox(key="cfg_model").value == "mlp"
        assert at.number_input(key="cfg_micro_batch_size").value == 16
        assert at.number_input(key="cfg_accum_steps").value == 3
        assert at.number_input(key="cfg_lr").value == pytest.approx(0.01)
        assert at.radio(key="cfg_amp").value == "bf16"
        assert any(run_id in c.value for c in at.caption)
        assert "autocast" in at.code[0].value and "bfloat16" in at.code[0].value
    finally:
        gate.release()
    runner().wait(run_id, timeout=120)


def test_a_session_with_its_own_settings_keeps_them_when_a_run_starts_elsewhere(runs_dir, gate):
    at = train_page()
    at.number_input(key="cfg_accum_steps").set_value(7).run()
    gate.hold(step=1)
    run_id = runner().submit(RunConfig(device="cpu", model="mlp", accum_steps=2, max_steps=2))
    gate.wait_until_held()
    try:
        at.run()
        assert at.number_input(key="cfg_accum_steps").value == 7
    finally:
        gate.release()
    runner().wait(run_id, timeout=120)


def test_a_run_whose_steps_were_mostly_skipped_is_flagged(runs_dir):
    # fp16 with an initial scale of 2^32 overflows and backs off one halving per step: all 6 skipped.
    config = RunConfig(device="cpu", model="mlp", amp="fp16", init_scale=2.0**32, max_steps=6)
    run_id = runner().submit(config)
    snapshot = runner().wait(run_id, timeout=300)
    assert snapshot.state == RunState.FINISHED
    assert snapshot.message.startswith("6 of 6 optimizer steps were skipped")
    assert runner().store.read_status(run_id)["message"] == snapshot.message
    at = AppTest.from_file(TRAIN, default_timeout=120)
    at.session_state["session_runs"] = [run_id]
    at.run()
    assert any("6 of 6 optimizer steps were skipped" in w.value for w in at.warning)


def test_a_run_with_few_skipped_steps_is_not_flagged(runs_dir):
    snapshot = runner().wait(runner().submit(RunConfig(device="cpu", model="mlp", amp="fp16", max_steps=3)),
                             timeout=300)
    assert snapshot.state == RunState.FINISHED and snapshot.message == ""


def test_the_empty_state_shows_no_empty_charts(runs_dir):
    at = train_page()
    assert not live_figures(at)
    assert any("No run yet" in i.value for i in at.info)


def test_controls_accept_a_loss_scale_between_the_offered_powers(runs_dir, gate):
    gate.hold(step=1)
    run_id = runner().submit(RunConfig(device="cpu", model="mlp", amp="fp16", init_scale=3000.0, max_steps=1))
    gate.wait_until_held()
    try:
        at = train_page()
        assert not at.exception
        assert at.select_slider(key="cfg_init_scale").value == 3000.0
    finally:
        gate.release()
    runner().wait(run_id, timeout=120)


def test_costly_options_say_what_they_cost_here_before_start(runs_dir, monkeypatch):
    from gaccum_core.plan import costs

    # The CPU's real fp16 slowdown varies by machine (see test_costs for the real probe); fixed here.
    monkeypatch.setattr(costs, "autocast_cost", lambda device, amp: costs.Cost(0.2, 16.0))
    at = train_page()
    at.selectbox(key="cfg_clear_cache").select("micro").run()
    at.radio(key="cfg_amp").set_value("fp16").run()
    assert not at.exception
    warnings = [w.value for w in at.sidebar.warning]
    assert any(w.startswith("Cache clearing takes") and "ms each time on this machine" in w for w in warnings), warnings
    assert any(w.startswith("fp16 autocast on this CPU runs a small conv net 16.0× slower") for w in warnings), warnings
    assert not at.button(key="start").disabled  # a warning, not a refusal


def test_a_named_run_carries_its_name_to_disk_progress_and_legends(runs_dir):
    at = train_page()
    at.selectbox(key="cfg_model").select("mlp")
    at.number_input(key="cfg_max_steps").set_value(2)
    at.text_input(key="run_name").input("baseline fp32").run()
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    assert run_id.endswith("baseline-fp32")
    assert runner().wait(run_id).state == RunState.FINISHED
    assert runner().store.read_status(run_id)["name"] == "baseline fp32"
    at.run()
    assert any("baseline fp32" in p.proto.text for p in at.get("progress"))
    loss = live_figures(at)["loss"]
    assert any(trace["name"].endswith("· baseline fp32") for trace in loss["data"])


def test_a_name_in_markdown_or_html_is_shown_as_typed_not_as_bold_text_and_links(runs_dir):
    """Issue 19 #12: a name is text. Markdown in it is escaped where Streamlit renders Markdown (the
    progress line), HTML where plotly renders HTML (legends), so neither bold text nor a live link shows."""
    name = "**B** [l](https://e.x/) <b>x</b>"
    at = train_page()
    at.selectbox(key="cfg_model").select("mlp")
    at.number_input(key="cfg_max_steps").set_value(2)
    at.text_input(key="run_name").input(name).run()
    at.button(key="start").click().run()
    (run_id,) = at.session_state["session_runs"]
    assert runner().wait(run_id).state == RunState.FINISHED
    at.run()
    (text,) = [p.proto.text for p in at.get("progress")]
    assert r"\*\*B\*\* `[l](https://e.x/)` \<b>x\</b>" in text, text  # a word Streamlit would link: in code
    assert "**B**" not in text
    names = [trace["name"] for trace in live_figures(at)["loss"]["data"] if trace.get("showlegend", True)]
    assert any(n.endswith("· **B** [l](https://e.x/) &lt;b&gt;x&lt;/b&gt;") for n in names), names
    assert not any("<b>" in n for n in names)


def test_progress_names_its_run_and_says_compiling_before_the_first_step(runs_dir, gate, monkeypatch):
    import torch

    import gaccum_core.train.device as device

    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: model)  # the page's words, not a real compile
    # The toolchain probe's cached answer, not a child process compiling (about 6 CPU-seconds): the real
    # probe runs in tests/execution/test_runner.py's compile test, its refusals in tests/pages/test_bad_input.py.
    monkeypatch.setattr(device, "compile_works_here", lambda device: (True, "works"))
    gate.hold(step=1)  # before the first forward pass, where torch.compile does its work
    run_id = runner().submit(RunConfig(device="cpu", model="mlp", max_steps=1, compile="default"))
    gate.wait_until_held()
    try:
        at = train_page()
        texts = [p.proto.text for p in at.get("progress")]
        # An unnamed run is named by when it was created, never by the end of its id.
        from gaccum_core.runs.labels import created_text
        named = f"mlp b=32 k=4 compile=default · {created_text(run_id)} — compiling the model"
        assert any(t.startswith(named) for t in texts), texts
    finally:
        gate.release()
        runner().stop(run_id)
    runner().wait(run_id)


# What the browser does with a number box: Streamlit's frontend reads an integer box with parseInt
# ("1e3" is 1) and a float box with parseFloat ("1e3" is 1000), then shows the value through the box's
# printf format. These tests read both off the box the page sends.
FLOAT_TYPE = 1  # NumberInput.DataType.FLOAT


def test_every_float_field_shows_the_value_that_runs(runs_dir):
    at = train_page()
    typed = {"cfg_momentum": 0.9999, "cfg_lr": 1.5e-5, "cfg_weight_decay": 0.000123, "cfg_grad_clip": 0.125}
    for key, value in typed.items():
        at.number_input(key=key).set_value(value)
    at.run()
    assert not at.exception
    for key, value in typed.items():
        box = at.number_input(key=key)
        assert float(box.proto.format % box.value) == value, (key, box.proto.format % box.value)


def test_an_integer_field_takes_1e3_as_1000_and_refuses_2_5_by_name(runs_dir):
    at = train_page()
    whole = [box for box in at.sidebar.number_input if isinstance(box.value, int) or box.value.is_integer()]
    assert whole and all(box.proto.data_type == FLOAT_TYPE for box in whole), \
        [box.key for box in whole if box.proto.data_type != FLOAT_TYPE]
    at.number_input(key="cfg_epochs").set_value(1e3).run()  # what parseFloat("1e3") sends
    assert not at.exception and not at.button(key="start").disabled
    assert at.query_params["epochs"] == "1000"  # the config holds the int 1000
    at.number_input(key="cfg_accum_steps").set_value(2.5).run()
    assert at.button(key="start").disabled
    assert any(e.value.startswith("Accumulation steps k = 2.5 is not allowed") for e in at.sidebar.error)


def test_every_refused_field_gets_its_own_message_at_once(runs_dir):
    at = train_page()
    for key, value in (("cfg_lr", 0.0), ("cfg_accum_steps", 0), ("cfg_momentum", 1.0), ("cfg_epochs", 0)):
        at.number_input(key=key).set_value(value)
    at.run()
    assert not at.exception and at.button(key="start").disabled
    messages = [e.value for e in at.sidebar.error]
    for label in ("Learning rate = 0.0", "Accumulation steps k = 0", "Momentum = 1.0", "Epochs = 0"):
        assert any(m.startswith(f"{label} is not allowed") for m in messages), (label, messages)


def reloaded(query_params: dict) -> AppTest:
    """A new session opened on the page's URL with these query parameters: what a reload opens."""
    at = AppTest.from_file(TRAIN, default_timeout=120)
    at.query_params = dict(query_params)
    return at.run()


def test_settings_and_the_run_name_survive_a_reload(runs_dir):
    at = train_page()
    at.selectbox(key="cfg_model").select("mlp")
    at.number_input(key="cfg_momentum").set_value(0.9999)
    at.number_input(key="cfg_accum_steps").set_value(8)
    at.radio(key="cfg_lr_schedule").set_value("cosine")
    at.text_input(key="run_name").set_value("fp16 try 1")
    at.run()
    assert not at.exception
    link = dict(at.query_params)
    assert link == {"model": "mlp", "momentum": "0.9999", "accum_steps": "8", "lr_schedule": "cosine",
                    "name": "fp16 try 1"}  # only what differs from the defaults
    again = reloaded(link)
    assert not again.exception and not again.sidebar.warning
    assert again.selectbox(key="cfg_model").value == "mlp"
    assert again.number_input(key="cfg_momentum").value == 0.9999
    assert again.number_input(key="cfg_accum_steps").value == 8
    assert again.radio(key="cfg_lr_schedule").value == "cosine"
    assert again.text_input(key="run_name").value == "fp16 try 1"


def test_a_bad_or_stale_value_in_the_link_is_named_and_the_default_shown(runs_dir):
    at = reloaded({"seed": "abc", "device": "cuda:7", "model": "gpt9", "lr": "0", "epochs": "2.5",
                   "accum_steps": "8", "colour": "red"})
    assert not at.exception
    warnings = [w.value for w in at.sidebar.warning]
    for words in ("Seed = 'abc'", "Device = 'cuda:7'", "Model = 'gpt9'", "Learning rate = 0.0", "Epochs = '2.5'"):
        assert any(words in w and "not used" in w for w in warnings), (words, warnings)
    assert at.number_input(key="cfg_seed").value == 0 and at.number_input(key="cfg_lr").value == 0.05
    assert at.selectbox(key="cfg_model").value == "cnn" and at.selectbox(key="cfg_device").value == "auto"
    assert at.number_input(key="cfg_accum_steps").value == 8  # the good value is kept
    assert not at.button(key="start").disabled


def test_any_run_on_disk_can_be_overlaid_not_only_this_tabs(runs_dir):
    # A run trained by another runner (an earlier server, a command line): on disk, unknown to this one.
    elsewhere = Runner(str(runs_dir), executor="thread", warm_spare=False)
    other = elsewhere.submit(RunConfig(device="cpu", model="mlp", max_steps=3), "from the command line")
    assert elsewhere.wait(other, timeout=60).state == RunState.FINISHED
    at = train_page()
    assert not runner().knows(other)
    overlay = at.multiselect(key="chart_overlay")
    assert other in overlay.options or any("from the command line" in o for o in overlay.options)
    overlay.set_value([other]).run()
    assert not at.exception
    loss = live_figures(at)["loss"]
    assert any("from the command line" in trace["name"] for trace in loss["data"]), [t["name"] for t in loss["data"]]


def test_past_the_runs_offered_the_newest_are_offered_and_a_picked_older_one_stays(runs_dir, monkeypatch):
    monkeypatch.setattr(run_picks, "OFFERED", 3)
    store = RunStore(runs_dir)
    # A second apart, in the order created (ids made in one second sort by their random part).
    monkeypatch.setattr(store, "new_run_id", lambda name=None: f"20260101-0000{len(store.list_runs()):02d}-abcdef")
    older = [store.create(RunConfig(device="cpu", model="mlp", seed=seed)) for seed in range(3)]
    at = train_page()
    overlay = at.multiselect(key="chart_overlay")
    assert len(overlay.options) == 3 and not any("newest" in c.value for c in at.caption)  # all offered: no caption
    overlay.set_value([older[0]]).run()
    for seed in range(3, 5):
        store.create(RunConfig(device="cpu", model="mlp", seed=seed))
    at.run()
    assert not at.exception
    overlay = at.multiselect(key="chart_overlay")
    assert overlay.value == [older[0]]  # picked, and no longer among the newest: still offered, still picked
    assert len(overlay.options) == 4 and all(any(f"seed={seed}" in o for o in overlay.options) for seed in (2, 3, 4))
    assert overlay.options[-1] == "mlp b=32 k=4"  # the picked one's chip: drawn alone, no seed differs (issue 42)
    assert any("The newest 3 of 5 runs" in c.value and "Runs page" in c.value for c in at.caption), \
        [c.value for c in at.caption]


def test_resume_of_a_run_deleted_elsewhere_says_so(runs_dir):
    at = train_page()
    at.selectbox(key="cfg_model").select("mlp")
    at.number_input(key="cfg_epochs").set_value(1000)
    at.run()
    at.button(key="start").click().run()
    at.button(key="stop").click().run()
    (run_id,) = at.session_state["session_runs"]
    assert runner().wait(run_id, timeout=60).state == RunState.STOPPED
    at.run()
    resume = at.button(key="resume")
    assert not resume.disabled and resume.label.endswith(" from its checkpoint"), resume.label  # offered, usable
    runner().delete(run_id)  # the Runs page, in another tab
    at.button(key="resume").click().run()
    assert not at.exception
    assert any(run_id in i.value and "deleted" in i.value for i in at.info), [i.value for i in at.info]
    assert "resume" not in [b.key for b in at.button]
    assert not (runs_dir / run_id).exists()


def test_every_chart_has_a_reachable_log_switch(runs_dir):
    at = train_page()
    log = at.multiselect(key="chart_log")  # a multiselect wraps: no row that scrolls out of reach
    from gaccum_core.views.charts import CHART_TITLES

    assert log.options == [CHART_TITLES[name] for name in CHARTS]  # every chart, by its title

"""The Plan page in AppTest: its defaults, a tiny measured plan (table, recommendation, both charts,
CSV), "Use these settings" opening the Train page with them, refused input, a budget nothing fits;
and the plan charts themselves on a plan made up here (out of memory cannot be provoked on the CPU)."""

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.element_tree import Element

from gaccum_core.config import RunConfig
from gaccum_core.plan.planner import Plan, PlanRequest, default_request
from gaccum_core.views.plan import memory_figure, progress_text, speed_figure
from gaccum_core.plan.search import FITS, OUT_OF_MEMORY, OVER_BUDGET, Candidate, Options

ROOT = Path(__file__).resolve().parents[2]
# cnn on 16×16 fake images, E=24 (divisors 1 2 3 4 6 8 12 24): at 0.5 MB (counted) fp32 fits up to b=8
# and bf16 up to b=12, so each search doubles to 24, does not fit, and bisects back.
TINY = [("plan_image_size", 16), ("plan_fake_samples", 64), ("plan_effective_batch", 24),
        ("plan_memory_budget_mb", 0.5)]


def plan_page() -> AppTest:
    """The Plan page opened from the home page, as a browser does (so st.switch_page finds Train)."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/5_Plan.py").run()
    assert not at.exception
    return at


def set_inputs(at: AppTest, inputs=TINY, clear_cache=("off",)) -> AppTest:
    """Type the tiny plan's numbers and cross only what `clear_cache` names."""
    at.selectbox(key="plan_device").select("cpu")
    for key, value in inputs:
        at.number_input(key=key).set_value(value)
    at.multiselect(key="plan_clear_cache").set_value(list(clear_cache))
    return at.run()


def figures(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def test_the_page_opens_with_the_default_plan(runs_dir):
    at = plan_page()
    default = default_request()
    base = default.base
    for key, value in (("model", base.model), ("dataset", base.dataset), ("optimizer", base.optimizer),
                       ("device", base.device)):
        assert at.selectbox(key=f"plan_{key}").value == value
    assert at.number_input(key="plan_image_size").value == base.image_size == 32
    assert at.number_input(key="plan_fake_samples").value == base.fake_samples
    assert at.number_input(key="plan_effective_batch").value == default.effective_batch == 256
    assert at.number_input(key="plan_memory_budget_mb").value == default.budget_mb
    assert at.multiselect(key="plan_amp").value == list(default.amp) == ["off", "bf16"]
    assert at.multiselect(key="plan_clear_cache").value == list(default.clear_cache) == ["off", "step"]
    assert at.multiselect(key="plan_compile").value == list(default.compile) == ["off"]
    assert any("the planner counts weights + gradients + optimizer state + activations" in c.value
               for c in at.sidebar.caption)
    assert not at.button(key="plan_run").disabled
    assert not at.get("plotly_chart") and not at.dataframe  # nothing planned yet
    # E=256 has 9 divisors (1, 2, 4 … 256): about 5 memory probes per combination, not 9, and 2 timed sizes.
    assert [c.value for c in at.main.caption if c.value.startswith("Plan crosses")] == [
        "Plan crosses 4 option combinations: fp32, fp32 + clear/step, bf16, bf16 + clear/step: about 20 memory "
        f"probes, then 8 sizes timed in turns, about {default.time_cap_s:g} s each."]
    at.multiselect(key="plan_amp").set_value(["bf16"])
    at.multiselect(key="plan_clear_cache").set_value(["off"]).run()
    assert any(c.value.startswith("Plan crosses 1 option combination: bf16: about 5 memory probes, then 2 sizes ")
               for c in at.main.caption)


def test_a_tiny_plan_shows_its_table_recommendation_charts_and_csv(runs_dir, downloads, monkeypatch):
    from gaccum_core.views import plan as plan_charts

    shown = []  # every progress line the page drew while planning
    monkeypatch.setattr(plan_charts, "progress_text", lambda *args: shown.append(args) or progress_text(*args))
    at = set_inputs(plan_page())
    at.button(key="plan_run").click().run()
    assert not at.exception
    plan = at.session_state["plan_result"]
    statuses = {c.status for c in plan.candidates}
    assert {FITS, OVER_BUDGET} <= statuses, statuses  # the largest sizes do not fit: the search bisected
    assert {c.micro_batch_size for c in plan.candidates} >= {1, 8, 12}
    done = len(plan.candidates)
    timed = [c for c in plan.candidates if c.timed_steps is not None]
    assert len(timed) == 4  # per combination, the largest size within the margin and the one below it
    # One progress line per memory probe and per timed step, each counted against about how many in all.
    assert [args[0] for args in shown] == list(range(1, done + sum(c.timed_steps for c in timed) + 1))
    assert all(args[1] >= args[0] for args in shown) and shown[-1][1] == shown[-1][0]
    assert [args[2].timed_steps for args in shown[:done]] == [None] * done  # the memory probes first
    (bar,) = at.get("progress")
    assert bar.proto.text.startswith(f"done: {done} candidates measured, 4 of them timed, in ")

    table = at.dataframe[0].value
    assert len(table) == done
    assert list(table.columns[:4]) == ["options", "micro-batch b", "accumulation k", "status"]
    assert set(table["options"]) == {"fp32", "bf16"}
    assert (table["micro-batch b"] * table["accumulation k"] == 24).all()
    speeds = table["samples/s (± 95% interval)"]
    assert [s for s in speeds if s != "not timed"] == [c.speed_words(unit=False) for c in timed]
    assert all(" ± " in s for s in speeds if s != "not timed") and list(speeds).count("not timed") == done - 4

    choice = plan.recommended
    assert choice is not None and choice.peak_mb <= 0.9 * 0.5
    (success,) = at.success
    assert (f"b={choice.micro_batch_size}, accumulation steps k={choice.accum_steps}, "
            f"mixed precision {choice.options.amp}") in success.value
    assert any(m.value == plan.reason for m in at.markdown)
    assert any("counted training memory" in c.value and f"{done} candidates" in c.value for c in at.caption)

    memory, speed, tradeoff = figures(at)
    names = [t["name"] for t in memory["data"]]
    assert [t["name"] for t in memory["data"] if t.get("meta") == "option"] == ["fp32", "bf16"]
    assert "budget 0.5 MB" in names and "budget less 10% margin (0.45 MB)" in names
    budget = next(t for t in memory["data"] if t["name"] == "budget 0.5 MB")
    assert budget["y"] == [0.5, 0.5]
    over = [s for t in memory["data"] if t.get("meta") == "option" for s in t["marker"]["symbol"]]
    assert over.count("x") == sum(c.status == OVER_BUDGET for c in plan.candidates)
    assert memory["layout"]["xaxis"]["type"] == "log"
    assert [t["name"] for t in speed["data"] if t.get("meta") == "option"] == ["fp32", "bf16"]
    (star,) = [t for t in speed["data"] if t.get("meta") == "recommended"]
    assert star["x"] == [choice.micro_batch_size] and star["y"] == [choice.samples_per_s]
    # Speed against memory: every timed candidate, all without checkpointing here (one lever colour).
    assert [t["name"] for t in tradeoff["data"] if t.get("meta") == "lever"] == ["checkpointing off"]
    bars = [e for t in speed["data"] if t.get("meta") == "option" for e in t["error_y"]["array"]]
    assert sorted(bars) == sorted(c.samples_per_s_error for c in timed)  # each speed's 95% interval
    assert speed["layout"]["yaxis"]["rangemode"] == "nonnegative"

    csv = pd.read_csv(io.BytesIO(downloads["plan_cnn_E24.csv"]))
    assert len(csv) == done and list(csv["micro_batch_size"]) == [c.micro_batch_size for c in plan.candidates]
    assert {"peak_mb", "samples_per_s", "status", "weights_mb", "activations_mb"} <= set(csv.columns)

    at.switch_page("app_pages/1_Train.py").run()  # the plan outlives a page switch
    at.switch_page("app_pages/5_Plan.py").run()
    assert len(at.dataframe[0].value) == done and len(at.get("plotly_chart")) == 3


def test_use_these_settings_opens_the_train_page_with_them(runs_dir):
    at = set_inputs(plan_page())
    at.selectbox(key="plan_optimizer").select("adam").run()
    at.button(key="plan_run").click().run()
    choice = at.session_state["plan_result"].recommended
    assert choice is not None
    at.button(key="plan_use").click().run()
    assert not at.exception
    assert at.title[0].value == "Train"
    assert at.number_input(key="cfg_micro_batch_size").value == choice.micro_batch_size
    assert at.number_input(key="cfg_accum_steps").value == choice.accum_steps == 24 // choice.micro_batch_size
    assert at.radio(key="cfg_amp").value == choice.options.amp
    assert at.selectbox(key="cfg_clear_cache").value == "off"
    assert at.selectbox(key="cfg_compile").value == "off"
    assert at.selectbox(key="cfg_model").value == "cnn" and at.selectbox(key="cfg_optimizer").value == "adam"
    assert at.number_input(key="cfg_image_size").value == 16 and at.number_input(key="cfg_fake_samples").value == 64
    assert at.selectbox(key="cfg_device").value == "cpu"
    assert at.metric[0].value == "24"  # the Train page's effective batch b·k is the planned E
    assert not at.button(key="start").disabled


def test_a_sharded_plan_shows_per_rank_memory_per_mode_and_carries_its_sharding_to_train(runs_dir):
    """Over 2 ranks in 0.25 MB per rank, the cnn's fixed parts (weights, gradients, momentum) whole on each rank
    leave room for smaller micro-batches than sharded: the page shows every mode per rank and carries the winner."""
    at = set_inputs(plan_page(), inputs=[*TINY[:3], ("plan_memory_budget_mb", 0.25), ("plan_nproc", 2)])
    at.multiselect(key="plan_amp").set_value(["off"])
    at.multiselect(key="plan_sharding").set_value(["ddp", "fsdp/every", "fsdp/last"]).run()
    assert any("over 2 ranks, E / N = 12 each" in c.value and "counted per rank from the same probes" in c.value
               for c in at.main.caption)
    at.button(key="plan_run").click().run()
    assert not at.exception
    plan = at.session_state["plan_result"]
    choice = plan.recommended
    safe = {m: max((c.micro_batch_size for c in plan.candidates if c.options.sharding == m and c.fits
                    and c.peak_mb <= 0.9 * 0.25), default=0) for m in ("ddp", "fsdp/every", "fsdp/last")}
    assert choice.options.sharding != "ddp" and choice.micro_batch_size == max(safe.values()) > safe["ddp"]
    assert f"sharding {choice.options.sharding} over 2 ranks" in at.success[0].value
    table = at.dataframe[0].value
    assert {"fp32", "fp32 + fsdp/every", "fp32 + fsdp/last"} <= set(table["options"])
    assert {"weights MB", "gradients MB", "optimizer MB", "gathered weights MB"} <= set(table.columns)
    memory, speed, _ = figures(at)
    assert memory["layout"]["title"]["text"] == "peak memory per rank per micro-batch size"
    assert {t["name"] for t in memory["data"] if t.get("meta") == "option"} == \
        {"fp32", "fp32 + fsdp/every", "fp32 + fsdp/last"}
    assert not any(t.get("meta") == "recommended" for t in speed["data"])  # counted, not timed: no star
    assert any("counted per rank" in c.value for c in at.main.caption)
    at.button(key="plan_use").click().run()
    assert not at.exception and at.title[0].value == "Train"
    assert at.number_input(key="cfg_nproc").value == 2
    assert at.radio(key="cfg_sharding").value == "fsdp"
    assert at.radio(key="cfg_fsdp_sync").value == choice.options.sharding.split("/")[1]
    assert at.number_input(key="cfg_micro_batch_size").value == choice.micro_batch_size


def test_sharding_over_one_process_is_refused_under_its_control(runs_dir):
    at = set_inputs(plan_page())
    at.multiselect(key="plan_sharding").set_value(["fsdp/every"]).run()
    assert at.button(key="plan_run").disabled
    assert any("ddp with one process" in e.value for e in at.sidebar.error)


def test_a_language_model_plan_carries_its_text_settings_to_the_train_page(runs_dir):
    """gpt on pydoc: the page offers GPT size and sequence length instead of the image controls, plans, and
    Use these settings gives the Train page the same language model, sequence length and planned b·k."""
    at = plan_page()
    at.selectbox(key="plan_device").select("cpu")
    at.selectbox(key="plan_model").select("gpt")
    at.selectbox(key="plan_dataset").select("pydoc").run()
    assert not at.number_input(key="plan_max_seq_len").disabled
    assert not any(n.key == "plan_image_size" for n in at.number_input)  # an image setting, hidden for text
    at.number_input(key="plan_max_seq_len").set_value(32)
    at.number_input(key="plan_effective_batch").set_value(8)
    at.multiselect(key="plan_amp").set_value(["off"])
    at.multiselect(key="plan_clear_cache").set_value(["off"]).run()
    at.button(key="plan_run").click().run()
    assert not at.exception
    plan = at.session_state["plan_result"]
    choice = plan.recommended
    assert choice is not None and plan.request.base.max_seq_len == 32
    assert all("tokens_per_s" in c.detail for c in plan.candidates if c.timed_steps is not None)
    at.button(key="plan_use").click().run()
    assert at.title[0].value == "Train"
    assert at.selectbox(key="cfg_model").value == "gpt" and at.selectbox(key="cfg_dataset").value == "pydoc"
    assert at.number_input(key="cfg_max_seq_len").value == 32
    assert at.number_input(key="cfg_micro_batch_size").value * at.number_input(key="cfg_accum_steps").value == 8


@pytest.mark.parametrize("setup,field,words", [
    ([("number_input", "plan_effective_batch", 0)], "Effective batch E",
     "Effective batch E = 0 is not allowed: an integer from 1"),
    ([("number_input", "plan_memory_budget_mb", 0.0)], "Memory budget (MB)",
     "Memory budget (MB) = 0.0 is not allowed: a number of megabytes > 0"),
    ([("number_input", "plan_memory_budget_mb", -5.0)], "Memory budget (MB)",
     "Memory budget (MB) = -5.0 is not allowed"),
    ([("multiselect", "plan_amp", [])], "Mixed precision",
     "Mixed precision is empty: choose one or more of off, fp16, bf16"),
    ([("multiselect", "plan_clear_cache", [])], "Cache clearing", "Cache clearing is empty"),
    ([("multiselect", "plan_compile", [])], "torch.compile", "torch.compile is empty"),
    ([("selectbox", "plan_model", "vit_b_16"), ("number_input", "plan_image_size", 8)], "Image size",
     "multiple of 16"),
    ([("selectbox", "plan_dataset", "mnist")], "Data directory", "mnist"),  # the data set is missing there
])
def test_bad_input_is_named_under_its_control_and_disables_plan(runs_dir, setup, field, words):
    at = plan_page()
    for kind, key, value in setup:
        element = getattr(at, kind)(key=key)
        element.select(value) if kind == "selectbox" else element.set_value(value)
    at.run()
    assert not at.exception
    assert at.button(key="plan_run").disabled
    assert any(words in e.value for e in at.sidebar.error), [e.value for e in at.sidebar.error]
    sidebar = [e for e in at.sidebar if isinstance(e, Element)]  # right under the named control
    control = next(i for i, e in enumerate(sidebar) if (getattr(e, "label", None) or "").startswith(field))
    assert type(sidebar[control + 1]).__name__ == "Error" and words in sidebar[control + 1].value, sidebar[control + 1]
    assert any(m.value.startswith("Cannot plan:") and words in m.value for m in at.main.error)


def test_a_budget_nothing_fits_in_says_so_and_offers_nothing_to_use(runs_dir):
    at = set_inputs(plan_page(), [*TINY[:3], ("plan_memory_budget_mb", 0.01)])
    at.button(key="plan_run").click().run()
    assert not at.exception
    plan = at.session_state["plan_result"]
    assert plan.recommended is None and all(c.status == OVER_BUDGET for c in plan.candidates)
    (warning,) = at.warning
    assert warning.value == plan.reason
    assert warning.value.startswith("Nothing fits in 0.01 MB, not even b=1 (over budget, ")
    assert not any(b.key == "plan_use" for b in at.button)
    assert not at.success
    assert len(at.dataframe[0].value) == len(plan.candidates) == 2  # b=1 per combination, then it stops


def made_up_plan() -> Plan:
    """fp32 runs out of memory at b=16 (no peak), bf16 goes over the budget at b=32."""
    request = PlanRequest(RunConfig(model="cnn", dataset="fake", micro_batch_size=1, accum_steps=1), 32, 100.0,
                          amp=("off", "bf16"))
    fp32, bf16 = Options(), Options(amp="bf16")
    candidates = [Candidate(fp32, 1, 32, FITS, 10.0, 100.0, 0.3), Candidate(fp32, 2, 16, FITS, 20.0, 150.0, 0.2),
                  Candidate(fp32, 4, 8, FITS, 40.0, 200.0, 0.16), Candidate(fp32, 8, 4, FITS, 80.0, 220.0, 0.15),
                  Candidate(fp32, 16, 2, OUT_OF_MEMORY, detail={"message": "OutOfMemoryError: CUDA out of memory"}),
                  Candidate(bf16, 1, 32, FITS, 6.0, 120.0, 0.27), Candidate(bf16, 2, 16, FITS, 11.0, 190.0, 0.17),
                  Candidate(bf16, 4, 8, FITS, 21.0, 260.0, 0.12), Candidate(bf16, 8, 4, FITS, 41.0, 300.0, 0.1),
                  Candidate(bf16, 16, 2, FITS, 81.0, 330.0, 0.1), Candidate(bf16, 32, 1, OVER_BUDGET, 161.0)]
    return Plan(request, "cuda:0", "allocator", candidates, recommended=candidates[9], reason="made up")


def test_the_memory_chart_marks_out_of_memory_at_the_budget_and_over_budget_at_its_peak():
    data = memory_figure(made_up_plan()).to_plotly_json()["data"]
    by_name = {t["name"]: t for t in data}
    assert list(by_name) == ["fp32", "fp32 · out of memory", "bf16", "budget 100 MB",
                             "budget less 10% margin (90 MB)"]
    oom = by_name["fp32 · out of memory"]
    assert list(oom["x"]) == [16] and list(oom["y"]) == [100.0] and oom["marker"]["symbol"] == "x"
    assert "out of memory" in oom["text"][0] and oom["legendgroup"] == "fp32" and oom["showlegend"] is False
    assert list(by_name["fp32"]["x"]) == [1, 2, 4, 8]  # no peak, no point on the line
    assert list(by_name["bf16"]["marker"]["symbol"]) == ["circle"] * 5 + ["x"]
    assert "over budget" in by_name["bf16"]["text"][-1]
    assert by_name["budget less 10% margin (90 MB)"]["line"]["dash"] == "dot"
    assert list(by_name["budget 100 MB"]["x"]) == [1, 32]


def test_the_speed_chart_draws_fitting_sizes_and_stars_the_recommendation():
    figure = speed_figure(made_up_plan()).to_plotly_json()
    by_name = {t["name"]: t for t in figure["data"]}
    assert list(by_name) == ["fp32", "bf16", "recommended: bf16 b=16"]
    assert list(by_name["fp32"]["x"]) == [1, 2, 4, 8] and list(by_name["bf16"]["x"]) == [1, 2, 4, 8, 16]
    star = by_name["recommended: bf16 b=16"]
    assert list(star["x"]) == [16] and list(star["y"]) == [330.0] and star["marker"]["symbol"] == "star"
    axis = figure["layout"]["xaxis"]
    assert axis["type"] == "log" and list(axis["tickvals"]) == [1, 2, 4, 8, 16, 32]


def test_progress_text_counts_estimates_and_names_the_last_candidate():
    timed = Candidate(Options(), 64, 4, FITS, 12.34, 1500.2, 0.17, samples_per_s_error=41.0, timed_steps=6)
    assert progress_text(3, 12, timed, 6.0) == (
        "step 3 of about 12 (memory probes, then timed steps) · about 18 s left · "
        "last: fp32 b=64 fits (12.3 MB, 1,500 ± 41 samples/s)")
    probed = Candidate(Options(), 64, 4, FITS, 12.34)
    assert progress_text(1, 100, probed, 10.0) == (
        "step 1 of about 100 (memory probes, then timed steps) · about 16 min 30 s left · "
        "last: fp32 b=64 fits (12.3 MB)")

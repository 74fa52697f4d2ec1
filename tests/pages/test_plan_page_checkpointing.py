"""The Plan page weighs activation checkpointing (issue 32): it crosses the settings chosen, shows speed against
memory for every timed candidate coloured by the lever, says the trade, and "Use these settings" carries
checkpointing to the Train page."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from gaccum_core.config import RunConfig
from gaccum_core.plan.planner import Plan, PlanRequest
from gaccum_core.plan.search import FITS, OVER_BUDGET, Candidate, Options
from gaccum_core.views.plan import LEVER, LEVER_COLOURS, RECOMMENDED, tradeoff_figure

ROOT = Path(__file__).resolve().parents[2]


def test_the_page_plans_gpt_with_and_without_checkpointing_and_carries_the_choice_to_train(runs_dir):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/5_Plan.py").run()
    at.selectbox(key="plan_device").select("cpu")
    at.selectbox(key="plan_model").select("gpt")
    at.selectbox(key="plan_dataset").select("pydoc").run()
    at.number_input(key="plan_max_seq_len").set_value(32)
    at.number_input(key="plan_effective_batch").set_value(64)
    at.number_input(key="plan_memory_budget_mb").set_value(3.0)
    at.multiselect(key="plan_amp").set_value(["off"])
    at.multiselect(key="plan_clear_cache").set_value(["off"])
    at.multiselect(key="plan_activation_checkpointing").set_value(["off", "full"]).run()
    assert "fp32 + ckpt/full" in " ".join(c.value for c in at.caption)  # said before measuring
    at.button(key="plan_run").click().run()
    assert not at.exception
    plan = at.session_state["plan_result"]
    assert {c.options.activation_checkpointing for c in plan.candidates} == {"off", "full"}
    assert "checkpointing" in plan.reason and plan.reason in [m.value for m in at.markdown]
    charts = {c.proto.id: c for c in at.get("plotly_chart")}
    assert len(charts) == 3  # memory and speed per b, and speed against memory by lever
    choice = plan.recommended
    at.button(key="plan_use").click().run()
    assert at.title[0].value == "Train"
    assert at.radio(key="cfg_activation_checkpointing").value == choice.options.activation_checkpointing
    assert at.number_input(key="cfg_micro_batch_size").value == choice.micro_batch_size


def test_the_tradeoff_chart_colours_each_lever_and_stars_the_recommendation():
    request = PlanRequest(RunConfig(model="gpt", dataset="pydoc", micro_batch_size=1, accum_steps=1), 64, 100.0,
                          amp=("off", "bf16"), activation_checkpointing=("off", "full"))
    off, full, bf16 = Options(), Options(activation_checkpointing="full"), Options(amp="bf16")
    candidates = [Candidate(off, 2, 32, FITS, 45.0, 700.0, 0.1, samples_per_s_error=10.0, timed_steps=5),
                  Candidate(off, 4, 16, FITS, 80.0, 1000.0, 0.1, samples_per_s_error=10.0, timed_steps=5),
                  Candidate(off, 8, 8, OVER_BUDGET, 150.0),
                  Candidate(full, 16, 4, FITS, 82.0, 1300.0, 0.1, samples_per_s_error=10.0, timed_steps=5),
                  Candidate(bf16, 8, 8, FITS, 70.0, 1100.0, 0.1, samples_per_s_error=10.0, timed_steps=5)]
    plan = Plan(request, "cpu", "counted", candidates, recommended=candidates[3], reason="made up")
    figure = tradeoff_figure(plan).to_plotly_json()
    levers = {t["name"]: t for t in figure["data"] if t["meta"] == LEVER}
    assert list(levers) == ["checkpointing off", "checkpointing full"]
    assert list(levers["checkpointing off"]["x"]) == [45.0, 80.0, 70.0]  # timed only: the over-budget b=8 has no speed
    assert list(levers["checkpointing off"]["marker"]["symbol"]) == ["circle", "circle", "diamond"]  # bf16: diamond
    assert levers["checkpointing full"]["marker"]["color"] == LEVER_COLOURS["full"] != LEVER_COLOURS["off"]
    assert list(levers["checkpointing full"]["text"]) == [""]  # the recommendation: its star says b and k
    star = next(t for t in figure["data"] if t["meta"] == RECOMMENDED)
    assert list(star["x"]) == [82.0] and list(star["y"]) == [1300.0]
    assert [text.strip() for text in star["text"]] == ["b=16 k=4"]
    assert [shape["x0"] for shape in figure["layout"]["shapes"]] == [100.0, 90.0]  # the budget and its margin

"""Plan: for an effective batch and a memory budget, the largest micro-batch that fits per option
combination, measured, and the fastest setting that fits with a margin."""

import streamlit as st

from dashboard.checks import device_turn, refusal, tokenise_aside
from dashboard.choices import choose, generated, model_note, text_settings, wants_text
from dashboard.controls import AC_LABELS, CLEAR_LABELS, LABELS as TRAIN_LABELS
from dashboard.messages import explain
from dashboard.server import get_runner
from dashboard.state import FieldWidgets, adopt_settings
from gaccum_core import config as cfg
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.train.device import device_choices, resolve_device
from gaccum_core.execution.aside import call_for
from gaccum_core.plan.planner import PlanRequest, config_from_plan, default_budget_mb, default_request, make_plan
from gaccum_core.plan.sharding import SHARDING_MODES
from gaccum_core.views.plan import (memory_figure, plan_csv, plan_table, progress_text, recommendation_words,
                                    speed_figure, table_formats, tradeoff_figure)

LABELS = {**TRAIN_LABELS, "effective_batch": "Effective batch E", "memory_budget_mb": "Memory budget (MB)",
          "nproc": "Processes N (ranks)"}
BASE_FIELDS = cfg.fields_with("planner", "base")  # the run a plan measures, as this page asks for it
TRAIN_FIELDS = (*BASE_FIELDS, *cfg.fields_with("planner", "chooses"))  # what "Use these settings" sets on Train
DEFAULT = default_request()

st.set_page_config(page_title="gaccum · Plan", layout="wide")
st.title("Plan")
st.write("For an effective batch E and a memory budget: the largest micro-batch b dividing E that fits, per "
         "option combination, found by measuring a few sizes around where the memory line predicts the budget "
         "falls; the sizes near it are timed in turns until their speed is known (±5%, 95% interval) or for "
         f"about {DEFAULT.time_cap_s:g} s each. Of the settings that leave {DEFAULT.margin:.0%} of the budget "
         "free, those the timing cannot tell from the fastest (within twice that precision, compared turn by "
         "turn) tie, and the largest b among them is recommended.")
controls = FieldWidgets("plan_", LABELS, DEFAULT.base)  # each input with the slot for its message, under it


with st.sidebar:
    st.header("Run")
    model = choose(controls, "model")
    refused = model_note(controls, model)
    dataset = choose(controls, "dataset")
    if wants_text(model, dataset):  # a language model's settings
        text_settings(controls, model, dataset)
    if dataset in cfg.RECORD_DATASETS:  # the records' fields the measured run reads (not the aggregation: a plan flag)
        generated(controls, "Model and data", leave_out=tuple(n for n in cfg.fields_with("section", "Model and data")
                                                             if n not in BASE_FIELDS))
    if dataset not in cfg.TEXT_DATASETS:
        if dataset == "fake":
            controls.add("fake_samples", st.number_input, step=256)
        if dataset in ("mnist", "fashionmnist", "cifar10", "imagefolder"):
            controls.add("data_dir", st.text_input)
        controls.add("image_size", st.number_input, step=8)
    controls.add("optimizer", st.selectbox, options=cfg.OPTIMIZERS,
                 help="sgd, adam or adamw: its state (momentum, Adam's moments) counts in the memory")
    device = resolve_device(controls.add("device", st.selectbox, options=device_choices()))
    st.header("Target")
    controls.add("effective_batch", st.number_input, DEFAULT.effective_batch, step=1,
                 help="samples per optimizer step; each candidate b divides it, k = E / b")
    cuda_budget = default_budget_mb(device)
    controls.add("memory_budget_mb", st.number_input, round(cuda_budget or DEFAULT.budget_mb, 1), step=16.0,
                 help="the most a candidate's peak may take on each rank; the default on CUDA is the GPU's whole "
                      "memory less 10 %, whether a run goes or not: the plan measures once the runs on its GPU have "
                      "ended")
    controls.add("nproc", st.number_input, DEFAULT.world_size, step=1,
                 help="the ranks E is split over: each trains E / N per step, within the budget")
    if device.type != "cuda":
        st.caption("On the CPU the planner counts weights + gradients + optimizer state + activations: the "
                   "process's resident memory is mostly the interpreter and libraries.")
    st.header("Options to cross")
    controls.add("amp", st.multiselect, list(DEFAULT.amp), options=cfg.AMP_MODES)
    controls.add("clear_cache", st.multiselect, list(DEFAULT.clear_cache), options=cfg.CLEAR_CACHE_MODES,
                 format_func=CLEAR_LABELS.get)
    controls.add("compile", st.multiselect, list(DEFAULT.compile), options=["off", "default"])
    checkpointing = controls.add("activation_checkpointing", st.multiselect, list(DEFAULT.activation_checkpointing),
                                 options=cfg.AC_MODES, format_func=AC_LABELS.get,
                                 help="the other memory lever: each checkpointed block keeps only its input and "
                                      "recomputes its activations in backward, so a larger b fits, at the cost of "
                                      "recomputing")
    if "selective" in checkpointing:
        controls.add("ac_every", st.number_input, step=1)
    controls.add("sharding", st.multiselect, list(DEFAULT.sharding), options=SHARDING_MODES,
                 help="ddp: everything whole on each rank; fsdp/every: weights, gradients and optimizer state 1/N "
                      "per rank, gradients reduce-scattered after every micro-batch; fsdp/last: the same, but the "
                      "whole fp32 gradient kept until the window's last micro-batch. The fsdp modes need N ≥ 2 and "
                      "are counted per rank from the same probes, not timed")

values = controls.values
request, problem = None, ("model", refused) if refused else None  # an hf: directory refused under its name
try:
    base = RunConfig(**{f: values[f] for f in BASE_FIELDS if f in values}, micro_batch_size=1, accum_steps=1)
    request = PlanRequest(base, values["effective_batch"], values["memory_budget_mb"], tuple(values["amp"]),
                          tuple(values["clear_cache"]), tuple(values["compile"]), tuple(values["sharding"]),
                          values["nproc"], activation_checkpointing=tuple(values["activation_checkpointing"]))
    if problem is None:
        problem = refusal(base, LABELS)
except ConfigError as exc:
    problem = problem or (exc.field, explain(exc, LABELS))
if problem:
    controls.error(*problem)
    st.error(f"Cannot plan: {problem[1]}")

if request is not None:  # what Plan will measure, as the server has it: said before anything is measured
    st.caption(request.work_words())
if st.button("Plan", type="primary", key="plan_run", disabled=problem is not None):
    try:
        tokenise_aside(request.base)  # a corpus not yet tokenised: once, in a worker process, with its progress
        first = "measuring the first candidate (it loads the data and builds the model)…"
        bar = st.progress(0.0, text=first)
        # Your own model or data set, or a GPU: measured in a worker process of its own, never in the server; on a
        # GPU only once the runs on it have ended (the device queue), and a run started meanwhile waits for the plan.
        plan = call_for(request.base, make_plan, request, progress=lambda done, about, candidate, seconds: bar.progress(
            min(done / about, 1.0), text=progress_text(done, about, candidate, seconds)),
            device=device, turn=device_turn(get_runner(), bar, first))
        st.session_state["plan_result"] = plan
        bar.progress(1.0, text=plan.done_words())
    except (ValueError, RuntimeError, OSError) as exc:
        st.error(f"Cannot plan: {exc}")

plan = st.session_state.get("plan_result")
if plan is not None:
    asked = plan.request
    st.subheader(plan.title())
    choice = plan.recommended
    if choice is None:
        st.warning(plan.reason)
    else:
        st.success(f"Recommended: {recommendation_words(choice, asked.world_size)}.")
        st.write(plan.reason)
        if st.button("Use these settings", key="plan_use", help="sets the Train page's controls and opens it"):
            adopt_settings(config_from_plan(asked.base, plan), fields=TRAIN_FIELDS, replace=True)
            st.switch_page("app_pages/1_Train.py")
    left, right = st.columns(2)
    left.plotly_chart(memory_figure(plan), key="plan_memory", theme=None)
    right.plotly_chart(speed_figure(plan), key="plan_speed", theme=None)
    st.plotly_chart(tradeoff_figure(plan), key="plan_tradeoff", theme=None)
    numbers = {name: st.column_config.NumberColumn(format=fmt) for name, fmt in table_formats().items()}
    st.dataframe(plan_table(plan), hide_index=True, width="stretch", column_config=numbers)
    st.download_button("Download CSV", plan_csv(plan), mime="text/csv", key="plan_download",
                       file_name=f"plan_{asked.base.model}_E{asked.effective_batch}.csv")
    st.caption(f"Peak memory: {plan.memory_words()}. {len(plan.candidates)} candidates "
               f"measured in {plan.seconds:.1f} s. Speeds: the mean samples/s of the timed steps ± the half-width "
               f"of its 95% interval; untimed sizes show no speed.")

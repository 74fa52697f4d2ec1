"""Equivalence: on your model and data, does accumulation give the one-big-batch gradient and training?"""

import time

import streamlit as st

from gaccum_core import config as cfg
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.lab.equivalence import ReferenceTooLarge, compare_gradients, train_side_by_side
from gaccum_core.execution.aside import call_for
from gaccum_core.train.device import resolve_device
from gaccum_core.train.metrics import time_left_words
from gaccum_core.views.lab import gradient_figure, side_by_side_figures
from dashboard.checks import device_turn, refusal, tokenise_aside
from dashboard.choices import choose, generated, image_settings, model_note, text_settings, wants_text
from dashboard.controls import LABELS
from dashboard.messages import explain
from dashboard.server import get_runner
from dashboard.state import FieldWidgets, widget
from dashboard.your_loop import your_loop

MAX_STEPS = 500


def progress_bar(what: str, unit: str):
    """A progress bar for a lab computation, and the callback that moves it: done of total, time left."""
    bar, started = st.progress(0.0, text=f"{what}…"), time.monotonic()

    def moved(done: int, total: int) -> None:
        elapsed = time.monotonic() - started
        left = time_left_words(elapsed / done * (total - done)) if done else ""
        bar.progress(min(done / total, 1.0), text=f"{what}: {unit} {done} of {total}" + (f" · {left}" if left else ""))

    return bar, moved


st.set_page_config(page_title="gaccum · Equivalence", layout="wide")
st.title("Equivalence check")
engine, yours = st.tabs(["gaccum's engine", "Your loop"])
with yours:  # drawn first: a refusal of the engine's settings below ends the page's script
    your_loop(progress_bar)
with engine:
    st.write("The same b·k samples, once as one big batch and once as k accumulated micro-batches of b, "
             "from the same weights: do the gradients and the training agree?")

    fields = FieldWidgets("eq_", LABELS, RunConfig(model="mlp"))  # each setting with a slot for its message
    left, middle, right = st.columns(3)
    with left:
        model = choose(fields, "model")
        refused = model_note(fields, model)
        fields.add("no_dropout", st.checkbox)
        dataset = choose(fields, "dataset")
        if wants_text(model, dataset):
            text_settings(fields, model, dataset)
        if dataset in cfg.RECORD_DATASETS:  # the records' fields and aggregation, weighed as the run weighs them
            generated(fields, "Model and data")
        if dataset not in cfg.TEXT_DATASETS:
            image_settings(fields, dataset)
    with middle:
        # Typed as on the Train page (a slider jumps values per pixel); RunConfig refuses what cannot run.
        b = fields.add("micro_batch_size", st.number_input, 8, step=1)
        k = fields.add("accum_steps", st.number_input, 4, step=1)
        st.caption(f"Effective batch b·k = {b * k}")
    with right:
        fields.add("reduction", st.radio, options=cfg.REDUCTIONS, horizontal=True)
        fields.add("amp", st.radio, options=cfg.AMP_MODES, horizontal=True)
        steps = widget(st.number_input, "Optimizer steps to train both", "eq_steps", 20)  # checked below: no bounds
        steps_slot = st.empty()

    def refuse(field: str, message: str) -> None:
        """The refusal under its control when the page has one, and above the results."""
        if field in fields.slots:
            fields.error(field, message)
        st.error(message)

    if refused:  # shown under the model's name
        st.error(refused)
        st.stop()
    try:
        config = RunConfig(**fields.values, lr=0.05)
        problem = refusal(config, LABELS, whole_window=True)  # b·k must fit the data
    except ConfigError as exc:
        problem = exc.field, explain(exc, LABELS)
    if problem:
        refuse(*problem)
        st.stop()
    if not (isinstance(steps, int) and 1 <= steps <= MAX_STEPS):
        message = f"Optimizer steps to train both = {steps!r} is not allowed: an integer from 1 to {MAX_STEPS}"
        steps_slot.error(message)
        st.error(message)
        st.stop()

    if st.button("Compare", type="primary", key="eq_run"):
        try:
            tokenise_aside(config)  # a corpus not yet tokenised: once, in a worker process, with its progress
            device = resolve_device(config.device)
            bar, moved = progress_bar("Computing both gradients", "samples")
            # Your own model or data set, or a GPU: compared in a worker process of its own, never in the server; on a
            # GPU once the runs on it have ended (the device queue), as the Plan page measures.
            st.session_state["eq_report"] = call_for(config, compare_gradients, config, progress=moved, device=device,
                                                     turn=device_turn(get_runner(), bar, "Computing both gradients…"))
            bar.empty()
            training = f"Training both for {steps} steps"
            bar, moved = progress_bar(training, "step")
            st.session_state["eq_side"] = call_for(config, train_side_by_side, config, steps, progress=moved,
                                                   device=device, turn=device_turn(get_runner(), bar, f"{training}…"))
            bar.empty()
        except ReferenceTooLarge as exc:
            st.session_state.pop("eq_report", None)
            st.error(str(exc))
            st.info(f"The largest effective batch whose reference fits here is {exc.largest_fitting}: "
                    f"set k to {max(exc.largest_fitting // b, 1)}.")
        except ConfigError as exc:  # your model or data set refused when loaded
            st.session_state.pop("eq_report", None)
            refuse(exc.field, explain(exc, LABELS))
        except (ValueError, RuntimeError) as exc:
            st.error(f"{type(exc).__name__}: {exc}")

    report, side = st.session_state.get("eq_report"), st.session_state.get("eq_side")
    if report is not None:
        (st.success if report.equal else st.warning)(report.verdict)
        if not report.equal:  # which modules differ, and the cause found in each
            worst = st.column_config.NumberColumn("worst relative L2", format="%.1e")
            st.dataframe(report.modules[~report.modules["equal"]], hide_index=True, width="stretch",
                         column_config={"worst_rel_l2": worst})
        st.plotly_chart(gradient_figure(report.table), key="eq_gradients", theme=None)
        with st.expander("Per tensor: max |difference|, relative L2 error, cosine similarity"):
            st.dataframe(report.table, hide_index=True, width="stretch")
        st.download_button("Download the gradient comparison (CSV)", report.table.to_csv(index=False),
                           file_name="gaccum-gradients.csv", mime="text/csv", key="eq_download_gradients")
    if side is not None:
        losses, distance = side_by_side_figures(side)
        a, b_col = st.columns(2)
        a.plotly_chart(losses, key="eq_losses", theme=None)
        b_col.plotly_chart(distance, key="eq_distance", theme=None)
        st.download_button("Download the side-by-side training (CSV)", side.to_csv(index=False),
                           file_name="gaccum-side-by-side.csv", mime="text/csv", key="eq_download_side")

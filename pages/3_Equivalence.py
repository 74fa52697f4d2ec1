"""Equivalence: on your model and data, does accumulation give the one-big-batch gradient and training?"""

import streamlit as st

from gaccum_core import config as cfg
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.lab.equivalence import ReferenceTooLarge, compare_gradients, train_side_by_side
from gaccum_core.views.lab import gradient_figure, side_by_side_figures
from dashboard.ui import widget

st.set_page_config(page_title="gaccum · Equivalence", layout="wide")
st.title("Equivalence check")
st.write("The same b·k samples, once as one big batch and once as k accumulated micro-batches of b, "
         "from the same weights: do the gradients and the training agree?")

left, middle, right = st.columns(3)
with left:
    model = widget(st.selectbox, "Model", "eq_model", "mlp", options=cfg.MODELS)
    dataset = widget(st.selectbox, "Dataset", "eq_dataset", "digits", options=cfg.DATASETS)
with middle:
    b = widget(st.slider, "Micro-batch size b", "eq_b", 8, min_value=1, max_value=256)
    k = widget(st.slider, "Accumulation steps k", "eq_k", 4, min_value=1, max_value=64)
    st.caption(f"Effective batch b·k = {b * k}")
with right:
    reduction = widget(st.radio, "Loss reduction", "eq_reduction", "mean", options=cfg.REDUCTIONS, horizontal=True)
    amp = widget(st.radio, "Mixed precision", "eq_amp", "off", options=cfg.AMP_MODES, horizontal=True)
    steps = widget(st.number_input, "Optimizer steps to train both", "eq_steps", 20, min_value=1, max_value=500)

try:
    config = RunConfig(model=model, dataset=dataset, micro_batch_size=b, accum_steps=k, reduction=reduction,
                       amp=amp, lr=0.05)
except ConfigError as exc:
    st.error(str(exc))
    st.stop()

if st.button("Compare", type="primary", key="eq_run"):
    try:
        with st.spinner("Computing both gradients…"):
            st.session_state["eq_report"] = compare_gradients(config)
        with st.spinner(f"Training both for {steps} steps…"):
            st.session_state["eq_side"] = train_side_by_side(config, int(steps))
    except ReferenceTooLarge as exc:
        st.session_state.pop("eq_report", None)
        st.error(str(exc))
        st.info(f"The largest effective batch whose reference fits here is {exc.largest_fitting}: "
                f"set k to {max(exc.largest_fitting // b, 1)}.")
    except (ValueError, RuntimeError) as exc:
        st.error(f"{type(exc).__name__}: {exc}")

report, side = st.session_state.get("eq_report"), st.session_state.get("eq_side")
if report is not None:
    (st.success if report.equal else st.warning)(report.verdict)
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

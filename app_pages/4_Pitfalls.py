"""Pitfalls: the classic accumulation bugs, each run against the correct loop on the same samples."""

import streamlit as st

from gaccum_core.views.lab_reports import (report_csv, report_figure, report_metrics, report_table,
                                           report_table_formats)
from gaccum_core.views.lab import (checkpointing_csv, checkpointing_metrics, checkpointing_notes,
                                   checkpointing_table, checkpointing_table_formats, fsdp_csv, fsdp_measures,
                                   packing_measures, pitfall_csv, pitfall_figure, pitfall_table,
                                   pitfall_table_formats)
from gaccum_core.lab.mistakes import mistake
from gaccum_core.lab.pitfalls.catalog import (CHECKPOINTING_PITFALLS, CUDA_PITFALLS, FSDP_PITFALLS, PITFALLS,
                                              REPORT_PITFALLS, pitfall, setup_words)
from gaccum_core.lab.pitfalls.cuda_graphs import (KEY as CUDA_GRAPHS, case_words as cuda_graphs_words,
                                                 run_cuda_graphs_case)
from gaccum_core.lab.pitfalls.checkpointing import case_words, run_checkpointing_pitfalls
from gaccum_core.lab.pitfalls.fsdp_job import FSDP_STEPS, FsdpJobError, run_fsdp_pitfalls
from gaccum_core.lab.pitfalls.harness import run_pitfall
from gaccum_core.lab.pitfalls.reports import STEPS as REPORT_STEPS, case_words as report_words, run_reports
from gaccum_core.lab.pitfalls.sequences import KEY as SEQUENCES

STEPS = 20

st.set_page_config(page_title="gaccum · Pitfalls", layout="wide")
st.title("Pitfall gallery")
st.write("Each bug as people write it, trained from the same initial weights on the same samples as the "
         "correct loop; both are measured against one big batch of the same samples.")

results = st.session_state.setdefault("pitfall_results", {})
if st.button("Run all nine", type="primary", key="pitfalls_run"):
    bar = st.progress(0.0, text="starting")
    for i, key in enumerate(PITFALLS):
        bar.progress(i / len(PITFALLS), text=f"{i + 1} of {len(PITFALLS)}: {PITFALLS[key].title}")
        results[key] = run_pitfall(key, STEPS)
    bar.progress(1.0, text=f"{PITFALLS[SEQUENCES].title} again, with packing on")
    st.session_state["pitfall_packed"] = run_pitfall(SEQUENCES, STEPS, packing="on")
    bar.progress(1.0, text="done")

if results:
    st.dataframe(pitfall_table(results.values()), hide_index=True, width="stretch",
                 column_config={c: st.column_config.NumberColumn(format=f) for c, f in pitfall_table_formats().items()})
    st.download_button("Download all pitfall results (CSV)", pitfall_csv(results.values()),
                       file_name="gaccum-pitfalls.csv", mime="text/csv", key="pitfalls_download")


def show_case(number: int, key: str, result, steps: int, measures: list[tuple[str, str]] = ()) -> None:
    """One case: its title, what it trains, what goes wrong and the fix; once run, its figures and chart."""
    case = pitfall(key)
    st.subheader(f"{number}. {case.title}")
    st.caption(f"Trains {setup_words(key)}; {steps} optimizer steps.")
    text, chart = st.columns([2, 3])
    text.write(case.explanation)
    text.markdown(f"**Fix:** {case.fix}")
    if case.mistake:
        text.caption(f"The mistake, as `verify` names it: {mistake(case.mistake).name}.")
    if result is not None:
        text.metric("Weight distance after the last step", f"{result.final_distance_pitfall:.2e}",
                    delta=f"correct loop: {result.final_distance_correct:.1e}", delta_color="off",
                    delta_arrow="off")
        text.metric("Gradient-norm ratio (pitfall / reference)", f"{result.grad_norm_ratio:.2f}")
        chart.plotly_chart(pitfall_figure(result.frame, case.title), key=f"pitfall_{key}", theme=None)
    for label, value in measures:
        text.markdown(f"{label}: **{value}**")


for number, key in enumerate(PITFALLS, start=1):
    packed = st.session_state.get("pitfall_packed") if key == SEQUENCES else None
    show_case(number, key, results.get(key), STEPS, packing_measures(packed) if packed is not None else [])

st.header("FSDP (2 processes)")
st.write("FSDP2 shards the mlp over 2 processes (gloo): fully_shard on each Linear, then on the root. Each trap is "
         "set against the engine's own FSDP run (gaccum_core.train.fsdp with the engine's weighting) on the same "
         "samples; both are measured against one big batch in one process.")
fsdp = st.session_state.get("pitfall_fsdp")
if st.button("Run the FSDP cases", key="pitfalls_fsdp_run"):
    with st.spinner("Running the 2-process FSDP job: a few seconds, longer on a busy machine…"):
        try:
            fsdp = st.session_state["pitfall_fsdp"] = run_fsdp_pitfalls(FSDP_STEPS)
        except FsdpJobError as exc:
            st.error(f"The FSDP cases could not run: {exc}")
measures = fsdp_measures(fsdp) if fsdp is not None else {}
for number, key in enumerate(FSDP_PITFALLS, start=len(PITFALLS) + 1):
    show_case(number, key, fsdp and fsdp.results[key], FSDP_STEPS, measures.get(key, []))
if fsdp is not None:
    st.download_button("Download the FSDP results (CSV)", fsdp_csv(fsdp),
                       file_name="gaccum-pitfalls-fsdp.csv", mime="text/csv", key="pitfalls_fsdp_download")


def show_checkpointing_case(number: int, key: str, case) -> None:
    """One checkpointing case: its title, what it measures, what goes wrong and the fix; once run, its figures
    and the gradient of each parameter tensor."""
    text_of = pitfall(key)
    st.subheader(f"{number}. {text_of.title}")
    st.caption(case_words(key))
    text, table = st.columns([2, 3])
    text.write(text_of.explanation)
    text.markdown(f"**Fix:** {text_of.fix}")
    if case is None:
        return
    for label, value, beside in checkpointing_metrics(case):
        text.metric(label, value, delta=beside, delta_color="off", delta_arrow="off")
    for label, value in checkpointing_notes(case):
        text.markdown(f"{label}: **{value}**")
    table.write(case.verdict)
    table.dataframe(checkpointing_table(case), hide_index=True, width="stretch",
                    column_config={c: st.column_config.NumberColumn(format=f)
                                   for c, f in checkpointing_table_formats().items()})


st.header("Activation checkpointing")
st.write("One gradient on one batch from the same weights and seed, three ways: without checkpointing (the "
         "reference), with the first block checkpointed as the trap writes it, and with the engine's own "
         "checkpointing of that block (gaccum_core.train.activation: non-reentrant, RNG state preserved).")
checkpointing = st.session_state.get("pitfall_checkpointing")
if st.button("Run the checkpointing cases", key="pitfalls_checkpointing_run"):
    checkpointing = st.session_state["pitfall_checkpointing"] = run_checkpointing_pitfalls()
for number, key in enumerate(CHECKPOINTING_PITFALLS, start=len(PITFALLS) + len(FSDP_PITFALLS) + 1):
    show_checkpointing_case(number, key, checkpointing and checkpointing[key])
if checkpointing is not None:
    st.download_button("Download the checkpointing results (CSV)", checkpointing_csv(checkpointing.values()),
                       file_name="gaccum-pitfalls-checkpointing.csv", mime="text/csv",
                       key="pitfalls_checkpointing_download")

st.header("CUDA graphs")
st.write("A trap only a GPU shows: the same gradients, eager and compiled in a mode that records CUDA graphs. "
         "Without CUDA it is not run: here is what torch raises for it, and what gaccum says before Start.")
cuda_case = pitfall(CUDA_GRAPHS)
st.subheader(f"{len(PITFALLS) + len(FSDP_PITFALLS) + len(CHECKPOINTING_PITFALLS) + 1}. {cuda_case.title}")
st.caption(cuda_graphs_words())
text, shown = st.columns([2, 3])
text.write(cuda_case.explanation)
text.markdown(f"**Fix:** {cuda_case.fix}")
if st.button("Run the CUDA-graphs case", key="pitfalls_cuda_graphs_run"):
    st.session_state["pitfall_cuda_graphs"] = run_cuda_graphs_case()
graphs = st.session_state.get("pitfall_cuda_graphs")
if graphs is not None:
    shown.write(graphs.verdict)
    if graphs.error:
        shown.code(graphs.error, language=None, wrap_lines=True)
    shown.markdown("gaccum, for these settings on CUDA:")
    shown.code(graphs.refusal, language=None, wrap_lines=True)


def show_report_case(number: int, key: str, case, steps: int) -> None:
    """One report: its title, what it trains, what goes wrong and the fix; once run, its figures and drift chart."""
    text_of = pitfall(key)
    st.subheader(f"{number}. {text_of.title}")
    st.caption(report_words(key, steps))
    text, chart = st.columns([2, 3])
    text.write(text_of.explanation)
    text.markdown(f"**Fix:** {text_of.fix}")
    text.caption(f"The mistake, as `verify` names it: {mistake(text_of.mistake).name}.")
    if case is None:
        return
    chart.plotly_chart(report_figure(case), key=f"pitfall_{key}", theme=None)
    metrics = report_metrics(case)
    for column, (label, value, beside) in zip(st.columns(len(metrics)), metrics):
        column.metric(label, value, delta=beside, delta_color="off", delta_arrow="off")


st.header("Post-training losses: four public reports")
st.write("Four accumulation bugs reported in 2025–26 post-training code, each rebuilt as its report describes the "
         "loop, beside gaccum's exact loop (the engine's per-token weighting and accumulation step) from the same "
         "seeded tiny gpt, on the same windows of the bundled pg rollouts (token-mean of −A·log p over completion "
         "tokens). On the first window: the gradient's norm against the exact one's and the cosine between them; then "
         "the L2 drift between the two loops' weights after each plain-SGD step. Where the error is a constant scale, "
         "SGD takes it as a learning-rate factor; Adam divides each step by the gradient's own running scale, so "
         "under Adam such a bug barely shows (nearly scale-invariant, up to its ε).")
reports = st.session_state.get("pitfall_reports")
report_steps = st.columns([1, 3])[0].number_input("SGD steps", min_value=1, max_value=200, value=REPORT_STEPS,
                                                   key="pitfalls_reports_steps")
if st.button("Run the four reports", key="pitfalls_reports_run"):
    bar = st.progress(0.0, text="starting")
    reports = st.session_state["pitfall_reports"] = run_reports(
        int(report_steps), lambda done, total: bar.progress(done / total, text=f"{done} of {total} loops"))
    bar.progress(1.0, text="done")
if reports is not None:
    st.dataframe(report_table(reports.values()), hide_index=True, width="stretch",
                 column_config={c: st.column_config.NumberColumn(format=f) for c, f in report_table_formats().items()})
first_report = len(PITFALLS) + len(FSDP_PITFALLS) + len(CHECKPOINTING_PITFALLS) + len(CUDA_PITFALLS) + 1
for number, key in enumerate(REPORT_PITFALLS, start=first_report):
    case = reports and reports[key]
    show_report_case(number, key, case, len(case.frame) if case else int(report_steps))
if reports is not None:
    st.download_button("Download the reports' results (CSV)", report_csv(reports.values()),
                       file_name="gaccum-pitfalls-reports.csv", mime="text/csv", key="pitfalls_reports_download")

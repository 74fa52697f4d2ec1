"""Pitfalls: the classic accumulation bugs, each run against the correct loop on the same samples."""

import pandas as pd
import streamlit as st

from gaccum_core.views.lab import pitfall_figure
from gaccum_core.lab.pitfalls import PITFALLS, run_pitfall, setup_words

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
    bar.progress(1.0, text="done")

if results:
    summary = pd.DataFrame([{"pitfall": PITFALLS[r.key].title, "distance (pitfall)": r.final_distance_pitfall,
                             "distance (correct)": r.final_distance_correct, "grad-norm ratio": r.grad_norm_ratio}
                            for r in results.values()])
    st.dataframe(summary, hide_index=True, width="stretch",
                 column_config={c: st.column_config.NumberColumn(format="%.2e")
                                for c in ("distance (pitfall)", "distance (correct)")})
    frames = [r.frame.assign(pitfall=r.key) for r in results.values()]
    st.download_button("Download all pitfall results (CSV)", pd.concat(frames).to_csv(index=False),
                       file_name="gaccum-pitfalls.csv", mime="text/csv", key="pitfalls_download")

for number, (key, pitfall) in enumerate(PITFALLS.items(), start=1):
    st.subheader(f"{number}. {pitfall.title}")
    st.caption(f"Trains {setup_words(key)}; {STEPS} optimizer steps.")
    text, chart = st.columns([2, 3])
    text.write(pitfall.explanation)
    text.markdown(f"**Fix:** {pitfall.fix}")
    if key in results:
        result = results[key]
        text.metric("Weight distance after the last step", f"{result.final_distance_pitfall:.2e}",
                    delta=f"correct loop: {result.final_distance_correct:.1e}", delta_color="off")
        text.metric("Gradient-norm ratio (pitfall / reference)", f"{result.grad_norm_ratio:.2f}")
        chart.plotly_chart(pitfall_figure(result.frame, pitfall.title), key=f"pitfall_{key}", theme=None)

"""Views: plotly figures and tables built from runs, plans and lab results; pure, no I/O, no streamlit.

series (a run as the charts see it) → axes, ranges, colours, traces (what every run chart shares) →
charts (one builder per chart, with memory_chart and collectives_chart), applicable (which charts do not
apply), coinciding (which runs coincide) and chart_cache (specs shared by pages); plan, lab,
sweep_charts and sweep_table for their pages. Imports the layers below: train (metric math), plan, lab
and sweeps.
"""

"""Views: plotly figures and tables built from runs, plans and lab results; pure, no I/O, no streamlit.
Imports the shared vocabulary, train (metric columns), runs, plan and lab.
"""

from gaccum_core.exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "charts": ("build_figures", "RunSeries", "CHARTS", "X_AXES"),
    "chart_cache": ("ChartCache", "ChartInput", "ChartSet"),
    "plan": ("plan_table", "memory_figure", "speed_figure"),
    "lab": ("gradient_figure", "side_by_side_figures", "pitfall_figure"),
})

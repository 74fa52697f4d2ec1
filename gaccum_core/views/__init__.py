"""Views: plotly figures and tables built from runs, plans and lab results; pure, no I/O, no streamlit.
Imports the shared vocabulary, train (metric columns), runs, plan and lab.
"""

from gaccum_core.exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "series": ("RunSeries", "downsample", "is_language"),
    "axes": ("X_AXES", "TOKEN_AXES", "tokens_axis_note", "uirevision"),
    "coinciding": ("Coincidence", "coinciding"),
    "charts": ("build_figures", "CHARTS", "ALL_CHARTS", "LOG_BY_DEFAULT"),
    "chart_cache": ("ChartCache", "ChartInput", "ChartSet"),
    "colours": ("run_colours", "PALETTE"),
    "applicable": ("not_applicable",),
    "plan": ("plan_table", "table_formats", "format_table", "memory_figure", "speed_figure"),
    "lab": ("gradient_figure", "side_by_side_figures", "pitfall_figure"),
})

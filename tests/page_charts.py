"""Reading the Train page's live charts in AppTest: custom components, not st.plotly_chart elements."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest


def live_figures(at: AppTest) -> dict[str, dict]:
    """{chart name: plotly figure dict} of the live charts the page drew, in page order."""
    figures = {}
    for element in at.get("bidi_component"):
        figure = json.loads(element.proto.json).get("figure") if element.proto.json else None
        if element.proto.component_name == "gaccum_live_plotly_chart" and figure is not None:
            name = element.proto.id.rpartition("-chart_")[2]
            figures[name] = json.loads(figure)
    return figures

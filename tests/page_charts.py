"""Reading charts in AppTest: the Train page's live charts (custom components, not st.plotly_chart elements), and
the values of a plotly figure's arrays."""

from __future__ import annotations

import base64
import json

import numpy as np

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


def plotly_values(array) -> list:
    """A plotly JSON array as a list: plotly ships numpy arrays base64-encoded ({"dtype", "bdata"})."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)

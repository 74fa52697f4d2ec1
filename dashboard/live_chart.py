"""Plotly charts that a live run redraws every second, updated in place so that the user's zoom, pan
and hidden legend entries survive each redraw.

Why not st.plotly_chart: in Streamlit 1.67 its element id hashes the whole figure
(compute_and_register_element_id(..., key_as_main_identity=False, plotly_spec=...) in
streamlit/elements/plotly_chart.py, even with a key=), the browser keys the chart's React component
by that id, and the component never applies a changed figure to a graph it has drawn (its figure
state is set once, on mount). So every redraw with new points is a new element: the old graph is
unmounted and a new one drawn with Plotly.newPlot. layout.uirevision, which only acts across
Plotly.react calls on the same graph, never gets a say; the zoom snaps back at the next refresh,
and a drag still in progress when its graph is replaced does nothing.

Here a small st.components.v2 component keeps one graph per key= (its id does not hash the data) and
calls Plotly.react on it with each new figure, so plotly.js keeps the view while the figure's
uirevision stays the same (see gaccum_core.views.axes.uirevision). plotly.js is the copy plotly.py ships,
served by Streamlit from plotly's package directory as a (never drawn) v1 component's files.
The Train page draws every chart this way, live or not, so a run's end does not reset the view.
"""

from __future__ import annotations

from pathlib import Path

import plotly
import streamlit as st
import streamlit.components.v1 as components_v1
from streamlit.delta_generator import DeltaGenerator

from dashboard.prefetch import APP_URL_JS

# Streamlit serves the files of a declared v1 component's path at component/<name>/<file>.
_PLOTLY_FILES = components_v1.declare_component("plotly_js", path=Path(plotly.__file__).parent / "package_data")
PLOTLY_JS = f"component/{_PLOTLY_FILES.name}/plotly.min.js"  # relative to the app's base URL

_JS = APP_URL_JS + """
// One plotly.js for every chart of the page: the first chart loads it, the others wait for it.
const loading = new Map();

function loadPlotly(src) {
  if (!loading.has(src)) {
    loading.set(src, new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = src;
      script.onload = () => (window.Plotly ? resolve(window.Plotly) : reject(new Error(`no Plotly in ${src}`)));
      script.onerror = () => reject(new Error(`could not load ${src}`));
      document.head.appendChild(script);
    }));
  }
  return loading.get(src);
}

const CONFIG = {displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"]};

// Draws the newest figure with Plotly.react, one draw at a time per graph; figures that arrive
// during a draw are skipped but the last.
async function draw(graph, src) {
  const Plotly = await loadPlotly(src);
  graph.gaccumPlotly = Plotly;
  if (!graph.gaccumResize) {
    graph.gaccumResize = new ResizeObserver(() => graph.isConnected && Plotly.Plots.resize(graph));
    graph.gaccumResize.observe(graph);
  }
  while (graph.gaccumDrawn !== graph.gaccumFigure) {
    const json = graph.gaccumFigure;
    const figure = JSON.parse(json);
    await Plotly.react(graph, figure.data, figure.layout, CONFIG);
    graph.gaccumDrawn = json;
  }
}

export default function ({ parentElement, data }) {
  if (data.figure === null) {  // preload(): fetch plotly.js for the charts to come, draw nothing
    loadPlotly(appUrl(data.plotly_js)).catch(() => {});
    return;
  }
  let graph = parentElement.querySelector(":scope > .gaccum-live-chart");
  if (!graph) {
    graph = document.createElement("div");
    graph.className = "gaccum-live-chart";
    graph.style.width = "100%";
    parentElement.appendChild(graph);
  }
  graph.gaccumFigure = data.figure;
  if (!graph.gaccumDrawing) {
    graph.gaccumDrawing = draw(graph, appUrl(data.plotly_js))
      .catch((error) => { graph.textContent = `This chart could not be drawn: ${error.message}`; })
      .finally(() => { graph.gaccumDrawing = null; });
  }
  // Called when the chart leaves the page (and for a superseded update, when the graph stays).
  return () => setTimeout(() => {
    if (!graph.isConnected && graph.gaccumPlotly) {
      graph.gaccumResize.disconnect();
      graph.gaccumPlotly.purge(graph);
    }
  }, 0);
}
"""

_live_chart = st.components.v2.component("gaccum_live_plotly_chart", js=_JS, isolate_styles=False)


def plotly_chart(container: DeltaGenerator, spec: str, *, key: str) -> None:
    """Draw a plotly figure (its JSON) in `container` as a graph updated in place: the view the user
    chose (zoom, pan, hidden legend entries) survives every redraw while the figure's uirevision stays."""
    with container:
        _live_chart(key=key, data={"figure": spec, "plotly_js": PLOTLY_JS})


def preload(container: DeltaGenerator) -> None:
    """Load plotly.js in the page now, drawing nothing, so that the first chart drawn later (after Start)
    does not wait for its 3.5 MB: that wait was about 1 s of Start → first point in Chromium."""
    with container:
        _live_chart(key="plotly_preload", data={"figure": None, "plotly_js": PLOTLY_JS})

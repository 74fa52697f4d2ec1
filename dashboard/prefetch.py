"""Loading the next page's browser code while this one is read.

The browser fetches and compiles each widget's JavaScript the first time a page draws one: on a cold
server the Train page's first visit loaded ~50 chunks (selectbox, number box, slider, …) for 0.7 s of
its 1 s before Start was usable, the same visit 0.3 s when they were loaded (measured in Chromium).
The home page imports those chunks once it is drawn, so the Train page finds them in the browser.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

# The app's base URL, seen from a component: Streamlit's own assets are at ./static/js/index.<hash>.js.
APP_URL_JS = """
function appUrl(path) {
  const script = document.querySelector('script[type="module"][src*="/static/js/"]');
  return new URL(path, script ? new URL("../../", script.src) : new URL(".", document.baseURI)).href;
}
"""
_JS = APP_URL_JS + """
export default function ({ data }) {
  for (const file of data.files) import(appUrl(file)).catch(() => {});  // a chunk missing is only slower
}
"""
# The widget chunks the Train page draws (Streamlit names a widget's chunk after its component).
TRAIN_WIDGETS = ("Selectbox", "NumberInput", "Slider", "Radio", "Checkbox", "TextInput", "Multiselect", "Metric",
                 "Button", "Progress", "BidiComponent", "StreamlitSyntaxHighlighter")
_STATIC = Path(st.__file__).parent / "static"

_prefetch = st.components.v2.component("gaccum_prefetch", js=_JS, isolate_styles=False)


def widget_chunks(widgets: tuple[str, ...] = TRAIN_WIDGETS) -> list[str]:
    """The chunks of these widgets in this Streamlit's build, as paths under the app's base URL."""
    return [str(path.relative_to(_STATIC)) for name in widgets
            for path in sorted((_STATIC / "static" / "js").glob(f"{name}.*.js"))]


def prefetch_train_page() -> None:
    """Import the Train page's widget code in the browser now, drawing nothing."""
    _prefetch(key="prefetch_train", data={"files": widget_chunks()})

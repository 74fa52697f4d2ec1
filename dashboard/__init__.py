"""The Streamlit glue shared by app.py and app_pages/: session state, the run form's controls, live charts.

Importing it confines your own code (usercode): a page's thread, the server's, never imports a model or
data set function of yours; runs started from the pages import it in their worker processes.
"""

from streamlit.runtime.scriptrunner import get_script_run_ctx

from gaccum_core import usercode


def _in_a_page() -> bool:
    """Whether this thread runs a page (a Streamlit script run, in the server or an AppTest)."""
    return get_script_run_ctx(suppress_warning=True) is not None


usercode.confine(_in_a_page)

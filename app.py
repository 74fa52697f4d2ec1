"""gaccum's entry point (`streamlit run app.py`): the pages, in the sidebar's order, Home first."""

import streamlit as st

from dashboard import server
from dashboard.nav import PAGES

server.check_settings()  # a bad GACCUM_* setting ends the server here, before any worker starts
home, *others = PAGES
st.navigation([st.Page(home.script, title=home.title, icon=home.icon, default=True),
               *(st.Page(p.script, title=p.title, icon=p.icon, url_path=p.url_path) for p in others)]).run()

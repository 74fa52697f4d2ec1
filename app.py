"""gaccum's entry point (`streamlit run app.py`): the pages, in the sidebar's order, Home first."""

import streamlit as st

PAGES = [
    st.Page("pages/0_Home.py", title="Home", icon="🏠", default=True),
    st.Page("pages/1_Train.py", title="Train", icon="▶️", url_path="Train"),
    st.Page("pages/2_Runs.py", title="Runs", icon="📊", url_path="Runs"),
    st.Page("pages/3_Equivalence.py", title="Equivalence", icon="⚖️", url_path="Equivalence"),
    st.Page("pages/4_Pitfalls.py", title="Pitfalls", icon="🐞", url_path="Pitfalls"),
    st.Page("pages/5_Plan.py", title="Plan", icon="📐", url_path="Plan"),
]
st.navigation(PAGES).run()

"""The Streamlit glue shared by app.py and app_pages/: session state, the run form's controls, live charts."""

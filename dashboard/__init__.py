"""The Streamlit glue shared by app.py and pages/: session state, the run form's controls, live charts."""

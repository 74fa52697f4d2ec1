"""AppTest for the Pitfalls page's activation-checkpointing section: its button, figures and CSV export."""

from pathlib import Path

import pandas as pd
from streamlit.testing.v1 import AppTest

from gaccum_core.lab.pitfalls.catalog import CHECKPOINTING_PITFALLS, FSDP_PITFALLS, PITFALLS
from gaccum_core.lab.pitfalls.checkpointing import case_words

ROOT = Path(__file__).resolve().parents[2]


def test_pitfall_page_runs_the_checkpointing_cases_and_exports(runs_dir, downloads):
    at = AppTest.from_file(str(ROOT / "app_pages/4_Pitfalls.py"), default_timeout=120).run()
    assert not at.exception
    assert any(h.value == "Activation checkpointing" for h in at.header)
    first = len(PITFALLS) + len(FSDP_PITFALLS) + 1
    titles = [s.value for s in at.subheader]
    assert titles[first - 1:first + 1] == [f"{first + i}. {case.title}"
                                         for i, case in enumerate(CHECKPOINTING_PITFALLS.values())]
    captions = [c.value for c in at.caption]
    assert all(case_words(key) in captions for key in CHECKPOINTING_PITFALLS)
    assert not at.metric  # nothing measured before the button

    at.button(key="pitfalls_checkpointing_run").click().run()
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Trap: gradient norm of the checkpointed block"] == "0 (.grad None)"
    assert float(metrics["Trap: max |Δ grad| against no checkpointing"]) > 1e-3  # the dropout masks
    engine = [m for m in at.metric if m.label.startswith("The engine's checkpointing")]
    assert [m.value for m in engine] == ["0.0e+00", "0.0e+00"]
    shown = " ".join(m.value for m in at.markdown)
    assert "None of the inputs have requires_grad=True" in shown
    tables = [t.value for t in at.dataframe]
    assert len(tables) == 2 and all("max |Δ| engine" in table.columns for table in tables)
    frame = pd.read_csv(pd.io.common.BytesIO(downloads["gaccum-pitfalls-checkpointing.csv"]))
    assert list(frame["pitfall"].unique()) == list(CHECKPOINTING_PITFALLS)
    assert frame["right_max_abs_diff"].max() <= 1e-6

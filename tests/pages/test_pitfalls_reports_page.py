"""AppTest for the Pitfalls page's four post-training reports: numbered after the other sections, their button,
figures and CSV export."""

from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from gaccum_core.lab.pitfalls.catalog import (CHECKPOINTING_PITFALLS, CUDA_PITFALLS, FSDP_PITFALLS, PITFALLS,
                                              REPORT_PITFALLS)
from gaccum_core.lab.pitfalls.reports import REPORT_COLUMNS, case_words

ROOT = Path(__file__).resolve().parents[2]


def test_pitfall_page_runs_the_four_reports_and_exports(runs_dir, downloads):
    at = AppTest.from_file(str(ROOT / "app_pages/4_Pitfalls.py"), default_timeout=120).run()
    assert not at.exception
    assert any(h.value == "Post-training losses: four public reports" for h in at.header)
    first = len(PITFALLS) + len(FSDP_PITFALLS) + len(CHECKPOINTING_PITFALLS) + len(CUDA_PITFALLS) + 1
    titles = [s.value for s in at.subheader]
    assert titles[first - 1:] == [f"{first + i}. {case.title}" for i, case in enumerate(REPORT_PITFALLS.values())]
    assert all(case_words(key) in [c.value for c in at.caption] for key in REPORT_PITFALLS)
    assert not at.metric  # nothing measured before the button

    at.number_input(key="pitfalls_reports_steps").set_value(2)
    at.button(key="pitfalls_reports_run").click().run()
    assert not at.exception and not at.error
    ratios = [float(m.value) for m in at.metric if m.label == "‖g_bug‖ / ‖g_exact‖"]
    assert len(ratios) == 4 and abs(ratios[2] - 0.25) < 1e-6  # ms-swift: 1/k
    factors = [m.value for m in at.metric if m.label == "SGD lr factor"]
    assert factors[0] == factors[3] == "—" and float(factors[1]) == ratios[1]
    dropped = [m.value for m in at.metric if m.label == "Never trained"]
    assert dropped == ["18 samples"]  # 218 training rollouts, windows of 20
    assert sum(m.label == "Drift after 2 steps" for m in at.metric) == 4
    assert len(at.get("plotly_chart")) == 4
    table = at.dataframe[-1].value
    assert table["report"].tolist() == ["volcengine/verl #5625", "huggingface/trl #6024", "modelscope/ms-swift #10117",
                                        "ml-explore/mlx-lm #1413"]
    assert table["‖g_bug‖ / ‖g_exact‖"].tolist() == pytest.approx(ratios, abs=1e-6)
    # A report whose bug turns the gradient (verl, mlx-lm) has no scale, and its cells say so (not "None").
    assert table["predicted scale"].tolist()[::3] == table["SGD lr factor"].tolist()[::3] == ["— (not a scale)"] * 2
    assert float(table["predicted scale"][2]) == pytest.approx(0.25, abs=1e-6)
    frame = pd.read_csv(pd.io.common.BytesIO(downloads["gaccum-pitfalls-reports.csv"]))
    assert list(frame.columns) == [*REPORT_COLUMNS, "pitfall", "window_grad_ratio", "window_cosine",
                                   "predicted_scale", "sgd_lr_factor", "never_trained"]
    assert frame["pitfall"].tolist() == [key for key in REPORT_PITFALLS for _ in range(2)]
    assert (frame["drift"] > 1e-3).all()

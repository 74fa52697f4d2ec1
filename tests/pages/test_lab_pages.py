"""AppTest for the lab pages: the equivalence check and the pitfall gallery, with their CSV exports."""

from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]


def test_equivalence_page_compares_and_exports(runs_dir, downloads):
    at = AppTest.from_file(str(ROOT / "pages/3_Equivalence.py"), default_timeout=180).run()
    assert not at.exception
    at.number_input(key="eq_steps").set_value(5)
    at.button(key="eq_run").click().run()
    assert not at.exception
    assert "equal up to float rounding" in at.success[0].value
    assert len(at.get("plotly_chart")) == 3
    gradients = downloads["gaccum-gradients.csv"].decode().splitlines()
    assert gradients[0].startswith("name,shape,numel,max_abs_diff,rel_l2,cosine")
    side = downloads["gaccum-side-by-side.csv"].decode().splitlines()
    assert side[0] == "step,loss_big,loss_accum,weight_distance" and len(side) == 6


def test_equivalence_page_names_batchnorm(runs_dir):
    at = AppTest.from_file(str(ROOT / "pages/3_Equivalence.py"), default_timeout=180).run()
    at.selectbox(key="eq_model").select("cnn_bn")
    at.slider(key="eq_b").set_value(2)
    at.number_input(key="eq_steps").set_value(3)
    at.button(key="eq_run").click().run()
    assert not at.exception
    assert "BatchNorm" in at.warning[0].value


@pytest.mark.timeout(300)
def test_pitfall_page_runs_the_gallery_and_exports(runs_dir, downloads):
    at = AppTest.from_file(str(ROOT / "pages/4_Pitfalls.py"), default_timeout=240).run()
    assert not at.exception
    assert len(at.subheader) == 9
    at.button(key="pitfalls_run").click().run()
    assert not at.exception
    assert len(at.get("plotly_chart")) == 9
    summary = at.dataframe[0].value
    assert (summary["distance (pitfall)"] > 1e-3).all()
    assert (summary["distance (pitfall)"] > 10 * summary["distance (correct)"]).all()
    frame = pd.read_csv(pd.io.common.BytesIO(downloads["gaccum-pitfalls.csv"]))
    assert frame["pitfall"].nunique() == 9 and "distance_pitfall" in frame.columns

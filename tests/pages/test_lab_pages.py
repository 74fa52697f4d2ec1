"""AppTest for the lab pages: the equivalence check and the pitfall gallery, with their CSV exports."""

import re
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from gaccum_core.lab.pitfalls.catalog import PITFALLS

ROOT = Path(__file__).resolve().parents[2]


def test_equivalence_page_compares_and_exports(runs_dir, downloads):
    at = AppTest.from_file(str(ROOT / "app_pages/3_Equivalence.py"), default_timeout=180).run()
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
    at = AppTest.from_file(str(ROOT / "app_pages/3_Equivalence.py"), default_timeout=180).run()
    at.selectbox(key="eq_model").select("cnn_bn")
    at.number_input(key="eq_micro_batch_size").set_value(2)
    at.number_input(key="eq_steps").set_value(3)
    at.button(key="eq_run").click().run()
    assert not at.exception
    assert "BatchNorm" in at.warning[0].value


@pytest.mark.timeout(300)
def test_pitfall_page_runs_the_gallery_and_exports(runs_dir, downloads):
    at = AppTest.from_file(str(ROOT / "app_pages/4_Pitfalls.py"), default_timeout=240).run()
    assert not at.exception
    assert len(at.subheader) == 19  # the nine, three FSDP traps, two checkpointing traps, CUDA graphs, four reports
    at.button(key="pitfalls_run").click().run()
    assert not at.exception
    assert len(at.get("plotly_chart")) == 9
    summary = at.dataframe[0].value
    assert (summary["distance (pitfall)"] > 1e-3).all()
    assert (summary["distance (pitfall)"] > 10 * summary["distance (correct)"]).all()
    frame = pd.read_csv(pd.io.common.BytesIO(downloads["gaccum-pitfalls.csv"]))
    assert frame["pitfall"].nunique() == 9 and "distance_pitfall" in frame.columns
    # The mean of means on sequences, run again with packing on: every micro-batch holds as many target tokens,
    # and the textbook weighting lands where the exact one does.
    packed = [m.value for m in at.markdown if m.value.startswith("With packing on (documents joined")]
    assert len(packed) == 1, [m.value for m in at.markdown]
    pitfall, correct = (float(x) for x in re.findall(r"\d\.\d+e[-+]\d+", packed[0]))
    assert pitfall < 1e-5 and correct < 1e-5
    sequences = summary[summary["pitfall"] == PITFALLS["mean_of_means_sequences"].title]
    assert float(sequences["distance (pitfall)"].iloc[0]) > 1e3 * pitfall  # padded: far off, packed: on it


def test_equivalence_page_refuses_a_window_larger_than_the_training_set(runs_dir):
    at = AppTest.from_file(str(ROOT / "app_pages/3_Equivalence.py"), default_timeout=180).run()
    at.number_input(key="eq_micro_batch_size").set_value(256)
    at.number_input(key="eq_accum_steps").set_value(64)
    at.run()
    assert not at.exception
    assert any(e.value.startswith("Accumulation steps k = 64 is not allowed: at most 5 with b = 256")
               and "16384" in e.value and "1437" in e.value for e in at.error), [e.value for e in at.error]
    assert not [b for b in at.button if b.key == "eq_run"]  # nothing to compare


def test_equivalence_page_refuses_a_step_count_it_cannot_train(runs_dir):
    at = AppTest.from_file(str(ROOT / "app_pages/3_Equivalence.py"), default_timeout=180).run()
    at.number_input(key="eq_steps").set_value(2.5).run()
    assert not at.exception
    assert any("Optimizer steps to train both = 2.5 is not allowed" in e.value for e in at.error)
    at.number_input(key="eq_steps").set_value(1e3).run()
    assert any("= 1000 is not allowed: an integer from 1 to 500" in e.value for e in at.error)


def test_pitfall_page_says_what_each_case_trains(runs_dir):
    from gaccum_core.lab.pitfalls.catalog import PITFALLS, setup_words

    at = AppTest.from_file(str(ROOT / "app_pages/4_Pitfalls.py"), default_timeout=60).run()
    assert not at.exception
    captions = [c.value for c in at.caption]
    for key in PITFALLS:
        assert any(setup_words(key) in c for c in captions), key
    assert any("mlp on digits, b=8, k=4, adam lr 0.001" in c for c in captions)

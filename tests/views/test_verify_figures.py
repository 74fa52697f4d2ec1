"""verify's report drawn (views/verify.py): a random loop's one split run twice, no scale chart where no accumulation
mistake fits, and the downloads holding every split."""

import io
import json

import pandas as pd
import pytest

from gaccum_core.verify.report import SplitResult, VerifyReport
from gaccum_core.views.verify import difference_figure, report_csv, report_json, scale_figure


def made(mistake: str | None, splits: list[tuple[tuple[int, ...], float, float]]) -> VerifyReport:
    """A report as check_loop returns it, with these splits (sizes, difference, scale)."""
    return VerifyReport(invariant=mistake is None, matches_objective=None, mistake=mistake, residual=0.5,
                        factor=None, verdict="…", fix="…", splits=tuple(SplitResult(*s) for s in splits),
                        precision="fp32", tolerance=1e-5)


def test_a_random_loop_draws_its_one_split_run_twice_and_no_scale():
    report = made("nondeterministic", [((8,), 0.3, 1.0)])
    figure = difference_figure(report)
    assert figure.layout.title.text == "the split 8 run twice"
    assert list(figure.data[0].x) == ["8"] and list(figure.data[0].y) == [0.3]
    assert scale_figure(report) is None


def test_a_split_dependent_loop_has_no_scale_chart_and_an_exact_split_sits_on_the_floor():
    report = made("split_dependent", [((8,), 0.0, 1.0), ((4, 4), 0.0, 1.0), ((1, 7), 0.02, 0.9)])
    figure = difference_figure(report)
    assert list(figure.data[0].x) == ["4,4", "1,7"]  # the whole batch is the reference
    assert list(figure.data[0].y) == [1e-12, 0.02] and "0 (drawn at 1e-12)" in figure.data[0].customdata
    # the tolerance's words beside its line at 1e-5 (on a log axis, given as log10: -5), and the axis showing both
    (words,) = figure.layout.annotations
    assert words.text == "fp32 tolerance 1e-05" and words.y == pytest.approx(-5)
    low, high = figure.layout.yaxis.range
    assert low < -12 and high > -1.7  # the floor (1e-12) and 0.02 (10^-1.7), the tolerance between
    assert scale_figure(report) is None


def test_the_downloads_hold_every_split_and_the_json_is_verifys():
    report = made("divided_by_k_twice", [((8,), 0.0, 1.0), ((4, 4), 0.5, 0.5)])
    table = pd.read_csv(io.StringIO(report_csv(report)))
    assert table["split"].tolist() == ["8", "4,4"] and table["k"].tolist() == [1, 2]
    assert table["scale"].tolist() == [1.0, 0.5] and set(table["mistake"]) == {"divided_by_k_twice"}
    assert json.loads(report_json(report))["splits"][1] == {"sizes": [4, 4], "difference": 0.5, "scale": 0.5}
    assert list(scale_figure(report).data[0].x) == [1, 2]

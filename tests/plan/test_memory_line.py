"""The memory line on made-up points: fitted through two (b, peak) points or, from one, through the
origin (erring towards a size that fits), the points nearest the limit chosen, and the largest divisor
predicted within a limit."""

from __future__ import annotations

import math

import pytest

from gaccum_core.plan.memory_line import Line, fit, nearest_points, predicted_index

SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def test_two_points_give_the_line_through_them():
    line = fit([(1, 0.274), (64, 9.976)])  # the default plan's fp32: 0.12 MB + 0.154 MB per sample
    assert line.per_sample_mb == pytest.approx(0.154) and line.fixed_mb == pytest.approx(0.12)
    assert line.peak_mb(256) == pytest.approx(39.544)
    assert line.largest_within(32.0) == pytest.approx((32.0 - 0.12) / 0.154)


def test_one_point_gives_a_line_through_the_origin_that_over_estimates_the_growth():
    line = fit([(1, 0.274)])
    assert line == Line(0.0, 0.274)
    true = Line(0.12, 0.154)
    assert line.largest_within(32.0) < true.largest_within(32.0)  # a guess that errs towards fitting
    assert fit([]) is None
    assert fit([(8, 4.0), (8, 4.0)]) == Line(0.0, 0.5)


def test_memory_that_does_not_grow_fits_every_size_within_the_limit_and_none_above():
    flat = Line(5.0, 0.0)
    assert flat.largest_within(10.0) == math.inf and flat.largest_within(4.0) == -math.inf
    assert predicted_index(SIZES, [(1, 5.0), (256, 5.0)], 10.0) == len(SIZES) - 1
    assert predicted_index(SIZES, [(1, 5.0), (256, 5.0)], 4.0) == -1


def test_the_points_nearest_the_limit_bracket_it_when_they_can():
    points = [(1, 0.27), (64, 10.0), (128, 19.9), (256, 39.6)]
    assert nearest_points(points, 32.0) == [(128, 19.9), (256, 39.6)]
    assert nearest_points(points, 50.0) == [(128, 19.9), (256, 39.6)]  # both under: the two largest
    assert nearest_points(points, 0.1) == [(1, 0.27), (64, 10.0)]  # both over: the two smallest


def test_the_predicted_index_is_the_largest_size_within_the_limit():
    points = [(1, 0.274), (64, 9.976)]
    assert SIZES[predicted_index(SIZES, points, 32.0)] == 128
    assert SIZES[predicted_index(SIZES, points, 40.0)] == 256
    assert SIZES[predicted_index(SIZES, points, 9.976)] == 64  # exactly on the line: predicted to fit
    assert predicted_index(SIZES, points, 0.2) == -1
    assert predicted_index(SIZES, [], 32.0) is None

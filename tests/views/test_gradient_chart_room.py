"""The Equivalence page's gradient chart keeps room for its axis titles however long a model's tensor names are."""

import math

import pandas as pd

from gaccum_core.views.lab import gradient_figure

SHORT = ["1.weight", "1.bias", "3.weight", "3.bias"]
LONG = [f"transformer.h.{i}.attn.c_attn.weight" for i in range(12)]  # GPT-2's names: 33 and 34 characters
TICK_PX, TITLE_PX = 12, 14  # plotly's default tick label and axis title sizes


def table(names: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"name": names, "rel_l2": 1e-7, "max_abs_diff": 1e-9, "cosine": 1.0})


def bars_px(figure) -> float:
    return figure.layout.height - figure.layout.margin.t - figure.layout.margin.b


def test_long_tensor_names_get_room_below_and_leave_the_bars_and_the_y_title_their_height():
    short, long = gradient_figure(table(SHORT)), gradient_figure(table(LONG))
    for figure, names in ((short, SHORT), (long, LONG)):
        assert figure.layout.xaxis.tickangle is not None  # a fixed angle: the room the names take is known
        tilt = math.radians(-figure.layout.xaxis.tickangle)
        drop = max(map(len, names)) * 0.55 * TICK_PX * math.sin(tilt)  # 0.55 em: an average character's width
        assert figure.layout.margin.b >= drop + 2 * TITLE_PX, (figure.layout.margin.b, drop)
        assert figure.layout.yaxis.automargin and figure.layout.xaxis.automargin  # e-notation ticks pushed
        # The y title beside the bars, at its font, fits their height (it stood beyond them and was cut).
        assert len(figure.layout.yaxis.title.text) * 0.6 * TITLE_PX <= bars_px(figure)
    assert bars_px(long) == bars_px(short) and long.layout.height > short.layout.height

"""Issue 33 item 10 without a browser: the memory chart's two y axes draw the training memory (left) below the
process's resident memory (right), linear or log, whatever the two values; tests/browser/test_browser_figures.py
measures the pixels plotly.js draws for a real CPU run."""

import math

import numpy as np
import pandas as pd
import pytest

from gaccum_core.views.memory_chart import memory_figure
from gaccum_core.views.series import RunSeries


def cpu_run(train_mb: np.ndarray, rss_mb: np.ndarray) -> RunSeries:
    step = np.arange(1, len(train_mb) + 1)
    metrics = pd.DataFrame({"step": step, "train_mem_mb": train_mb, "activation_mb": train_mb / 4,
                            "weights_mb": 0.1, "gradients_mb": 0.1, "optimizer_mb": 0.1,
                            "mem_allocated_mb": rss_mb, "mem_reserved_mb": np.nan, "world_size": 1})
    return RunSeries("r", "cnn b=32 k=4", metrics, pd.DataFrame())


def heights(figure, log: bool) -> dict[str, tuple[float, float]]:
    """Each line's lowest and highest point as fractions of the plot's height, from the layout's ranges."""
    drawn = {}
    for trace in figure.data:
        if trace.y is None or all(v is None for v in trace.y):
            continue
        low, high = (figure.layout.yaxis2 if trace.yaxis == "y2" else figure.layout.yaxis).range
        ys = [math.log10(v) if log else v for v in trace.y]
        drawn[trace.name] = ((min(ys) - low) / (high - low), (max(ys) - low) / (high - low))
    return drawn


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("rss", [np.full(20, 753.0), np.linspace(300.0, 800.0, 20)], ids=["steady", "growing"])
def test_the_resident_memory_line_lies_above_the_training_memory_line(rss, log):
    train = np.r_[0.52, np.full(19, 0.56)]  # a real cnn run's: no optimizer state before the first step
    drawn = heights(memory_figure([cpu_run(train, rss)], "step", log_y=log), log)
    training, resident = drawn["cnn b=32 k=4"], drawn["cnn b=32 k=4 process memory (RSS)"]
    assert 0 <= training[0] and training[1] <= 0.65, drawn
    assert resident[0] >= 0.7 and resident[1] <= 0.95, drawn

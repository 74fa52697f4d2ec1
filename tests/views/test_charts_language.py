"""Dashboard figures of language runs: tokens per second, token accuracy, perplexity, the tokens-seen axis."""

import numpy as np
import pandas as pd
import pytest

from gaccum_core.views.axes import LEFT_OUT, tokens_axis_note
from gaccum_core.views.charts import (ALL_CHARTS, CHARTS, LOG_BY_DEFAULT, NO_EVALS, NO_LANGUAGE, NO_SCALER, PALETTE,
                                      WAITING, accuracy_figure, build_figures,
                                      perplexity_figure, throughput_figure)
from gaccum_core.views.collectives_chart import NO_COLLECTIVES
from gaccum_core.views.series import RunSeries, is_language
from gaccum_core.config import RunConfig
from gaccum_core.train.engine import Engine
from chart_runs import annotations, evals, metrics, run


# --- language runs ----------------------------------------------------------------------------

def lm_run(n, label="lm", evals_at=(), seed=0, fp16=False):
    """n optimizer steps of a language run: tokens per step vary (short last chunks), evals carry perplexity."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(200, 257, n)
    frame = metrics(n, seed=seed, fp16=fp16).assign(tokens=tokens, tokens_seen=np.cumsum(tokens),
                                         tokens_per_s=rng.uniform(5000, 6000, n))
    losses = np.linspace(5.0, 2.0, len(evals_at))
    ev = evals(list(evals_at)).assign(test_loss=losses, perplexity=np.exp(losses), eval_tokens=6400)
    return RunSeries(run_id=label, label=label, metrics=frame, evals=ev)


def test_a_language_run_gets_tokens_per_second_token_accuracy_and_perplexity():
    lm = lm_run(30, evals_at=[10, 20, 30])
    figures = build_figures([lm], "step", 0.6)
    assert list(figures) == ["loss", "accuracy", "perplexity", *list(CHARTS)[2:]]  # perplexity beside accuracy
    throughput = figures["throughput"]
    assert throughput.layout.yaxis.title.text == "tokens/s"
    assert list(throughput.data[0].y) == pytest.approx(lm.metrics["tokens_per_s"].tolist())
    accuracy = figures["accuracy"]
    assert accuracy.layout.title.text == "validation token accuracy" and tuple(accuracy.layout.yaxis.range) == (0, 1)
    perplexity = figures["perplexity"]
    assert "perplexity" in LOG_BY_DEFAULT and perplexity.layout.yaxis.type == "log"
    assert list(perplexity.data[0].x) == [10, 20, 30]
    assert list(perplexity.data[0].y) == pytest.approx(np.exp(np.linspace(5.0, 2.0, 3)))
    assert perplexity.layout.uirevision == "perplexity:step:log" and not annotations(perplexity)
    assert tuple(figures) == ALL_CHARTS  # the order a per-chart option (the log y pills) offers them in


def test_image_runs_keep_their_charts_and_get_no_perplexity():
    figures = build_figures([run(30, "img", evals_at=[30])], "step", 0.6)
    assert list(figures) == list(CHARTS)
    assert figures["throughput"].layout.yaxis.title.text == "samples/s"
    assert figures["accuracy"].layout.title.text == "test accuracy"
    assert not is_language(run(3)) and is_language(lm_run(3))
    old = RunSeries("old", "old", metrics(5).drop(columns=["tokens", "tokens_seen", "tokens_per_s"]), evals([5]))
    assert not is_language(old) and list(build_figures([old], "step", 0.6)) == list(CHARTS)  # rows from before tokens
    assert annotations(perplexity_figure([run(5)], "step")) == [NO_LANGUAGE]


def test_the_evaluation_hover_says_how_much_each_evaluation_covered():
    image, lm = run(30, "img", evals_at=[10, 30]), lm_run(30, "lm", evals_at=[10, 30])
    figures = build_figures([image, lm], "step", 0.6)
    accuracy = {trace.legendgroup: trace for trace in figures["accuracy"].data}
    assert accuracy["img"].hovertemplate == "%{y:.3f} over %{customdata:,.0f} test images"
    assert list(accuracy["img"].customdata) == [64, 64]
    assert accuracy["lm"].hovertemplate.endswith("over %{customdata:,.0f} target tokens")
    assert figures["perplexity"].data[0].hovertemplate == "%{y:.4g} over %{customdata:,.0f} target tokens"
    old = RunSeries("old", "old", metrics(30), evals([10]).drop(columns=["eval_samples", "eval_tokens"]))
    trace = accuracy_figure([old], "samples_seen").data[0]  # written before eval.csv counted it: plotly's own hover
    assert trace.hovertemplate is None and trace.customdata is None


def test_tokens_seen_is_an_x_axis_of_every_chart_of_a_language_run():
    lm = lm_run(40, evals_at=[20, 40])
    figures = build_figures([lm], "tokens_seen", 0.6)
    seen = lm.metrics["tokens_seen"].tolist()
    assert list(figures["loss"].data[1].x) == seen
    assert list(figures["throughput"].data[0].x) == seen
    for name in ("accuracy", "perplexity"):  # evaluations sit at the tokens seen by their step
        assert list(figures[name].data[0].x) == [seen[19], seen[39]], name
    for name, figure in figures.items():
        assert figure.layout.xaxis.title.text == "tokens seen", name
        assert figure.layout.uirevision.startswith(f"{name}:tokens_seen"), name
        assert figure.layout.xaxis.tickformat == ",d", name
        assert not annotations(figure) or annotations(figure) in ([NO_SCALER], [NO_COLLECTIVES]), name


def test_against_tokens_seen_image_runs_are_left_out_and_the_charts_say_so():
    image, lm = run(30, "img", evals_at=[30], fp16=True), lm_run(30, "lm", evals_at=[30], fp16=True)
    figures = build_figures([image, lm], "tokens_seen", 0.6)
    for name, figure in figures.items():
        if name == "collectives":
            continue  # one-process runs: nothing drawn there, a line on the page instead (views.applicable)
        drawn = {trace.legendgroup for trace in figure.data if not trace.uid.startswith("key-")}
        assert drawn == {"lm"}, name
        # perplexity is a chart of language runs only, whatever the x axis: nothing to say there
        assert (LEFT_OUT in annotations(figure)) == (name != "perplexity"), name
        colours = {t.line.color for t in figure.data if t.line.color and not t.uid.startswith("key-")}
        assert colours <= {PALETTE[1]}, name  # lm keeps its colour
    # Against steps both are drawn, and the throughput chart gives each unit its own axis.
    by_step = build_figures([image, lm], "step", 0.6)
    assert {t.legendgroup for t in by_step["loss"].data} == {"img", "lm"}
    throughput = by_step["throughput"]
    (samples,), (tokens,) = ([t for t in throughput.data if t.legendgroup == g and t.showlegend is not False]
                             for g in ("img", "lm"))
    assert samples.name == "img samples/s" and samples.yaxis in (None, "y")
    assert tokens.name == "lm tokens/s" and tokens.yaxis == "y2"
    assert throughput.layout.yaxis.title.text == "samples/s (image runs)"
    assert throughput.layout.yaxis2.title.text == "tokens/s (language runs)" and throughput.layout.yaxis2.side == "right"
    accuracy = by_step["accuracy"]
    assert [t.name for t in accuracy.data] == ["img", "lm (tokens)"] and "token accuracy" in accuracy.layout.title.text
    assert [t.name for t in by_step["perplexity"].data] == ["lm"]


def test_against_tokens_seen_image_runs_alone_fall_back_to_steps():
    image = run(30, "img", evals_at=[30])
    figures = build_figures([image], "tokens_seen", 0.6)
    steps = build_figures([image], "step", 0.6)
    assert list(figures) == list(CHARTS)
    for name in CHARTS:
        assert [list(t.x) for t in figures[name].data] == [list(t.x) for t in steps[name].data], name
        assert figures[name].layout.uirevision == steps[name].layout.uirevision, name
        assert "no run here counts tokens" in figures[name].layout.xaxis.title.text, name
    assert throughput_figure([], "tokens_seen").layout.annotations[0].text == WAITING


def test_the_tokens_axis_note_names_the_runs_it_leaves_out():
    assert tokens_axis_note([], 1) is None
    note = tokens_axis_note(["mlp b=32 k=4 · abc123"], 1)
    assert "mlp b=32 k=4 · abc123" in note and "count no tokens" in note and "optimizer step" in note
    assert "use optimizer steps" in tokens_axis_note(["mlp b=32 k=4 · abc123"], 0)


def test_a_language_run_without_evaluations_yet_says_so():
    figures = build_figures([lm_run(5)], "tokens_seen", 0.6)
    assert annotations(figures["perplexity"]) == [NO_EVALS] and annotations(figures["accuracy"]) == [NO_EVALS]


def test_a_real_gpt_run_draws_without_errors():
    rows, eval_rows = [], []

    class ListSink:
        def log_step(self, row):
            rows.append(row)

        def log_eval(self, row):
            eval_rows.append(row)

    config = RunConfig(model="gpt", dataset="pydoc", max_seq_len=16, micro_batch_size=2, accum_steps=2, device="cpu",
                       max_steps=3, eval_every=3)
    Engine(config).run(ListSink())
    real = RunSeries("real", "gpt b=2 k=2", pd.DataFrame(rows), pd.DataFrame(eval_rows))
    assert is_language(real)
    figures = build_figures([real], "tokens_seen", 0.6)
    assert list(figures["loss"].data[1].x) == [r["tokens_seen"] for r in rows]
    assert list(figures["perplexity"].data[0].y) == pytest.approx([eval_rows[-1]["perplexity"]])
    for figure in figures.values():
        figure.to_json()


def test_throughput_is_smoothed_like_the_loss_over_its_faint_raw_line():
    noisy = run(50)
    noisy.metrics["samples_per_s"] = np.where(np.arange(50) % 2, 1000.0, 3000.0)  # every other step slow
    raw_only = throughput_figure([noisy], "step", smoothing=0.0)
    assert len(raw_only.data) == 1 and np.ptp(np.asarray(raw_only.data[0].y, dtype=float)) == 2000.0
    smoothed = throughput_figure([noisy], "step", smoothing=0.9)
    raw, line = smoothed.data
    assert raw.showlegend is False and raw.opacity == 0.3
    ys = np.asarray(line.y, dtype=float)
    assert np.ptp(ys[10:]) < 500 and abs(ys[-1] - 2000.0) < 300  # the mean speed, not the zigzag


def test_every_trace_uid_is_css_safe():
    """plotly.js builds CSS selectors from uids ('.cbkey' + uid): a space or a bracket made Plotly.react
    and Plotly.purge throw, and the memory chart said "This chart could not be drawn"."""
    import re

    runs = [run(20, "20261124-081356-e1397b", evals_at=[10, 20], fp16=True), run(20, "b c(d)", cuda=True)]
    for name, figure in build_figures(runs, "step", 0.6).items():
        for trace in figure.data:
            assert re.fullmatch(r"[A-Za-z0-9_-]+", trace.uid), (name, trace.uid)

"""Dashboard figures of data-parallel runs: collectives per step, memory per rank."""

import pytest

from gaccum_core.views.charts import memory_figure
from gaccum_core.views.applicable import not_applicable
from gaccum_core.views.collectives_chart import NO_COLLECTIVES, collectives_figure
from gaccum_core.views.series import RunSeries
from chart_runs import annotations, ddp_run, evals, metrics, run


# --- collectives and memory per rank ---------------------------------------------------------

def sharded_run(n, label, sync="every", k=4, units=3, grad_mb=0.0655):
    """A 2-process FSDP run's rows: reduce-scatters per unit and synced micro-batch, all-gathers twice that per
    micro-batch (forward and backward), the gradient kept between micro-batches (1/N with every, all with last)."""
    synced = k if sync == "every" else 1
    frame = metrics(n).assign(world_size=2, reduce_scatter_calls=units * synced,
                              reduce_scatter_bytes=int(synced * grad_mb * 2**20), all_gather_calls=2 * units * k,
                              all_gather_bytes=int(2 * k * grad_mb * 2**20),
                              grad_kept_mb=grad_mb / 2 if sync == "every" else grad_mb)
    return RunSeries(run_id=label, label=label, metrics=frame, evals=evals([]))


def test_the_collectives_chart_draws_each_runs_calls_per_step_by_kind_with_the_bytes_in_the_hover():
    every, last, ddp = sharded_run(6, "fsdp/every"), sharded_run(6, "fsdp/last", sync="last"), ddp_run(6, "ddp")
    figure = collectives_figure([ddp, every, last], "step")
    lines = [t for t in figure.data if not t.uid.startswith("key-") and not t.uid.endswith("--legend")]
    by_run_kind = {(t.legendgroup, t.uid.rsplit("--", 1)[1]): t for t in lines}
    assert set(by_run_kind) == {("ddp", "allreduce"), ("fsdp/every", "reduce_scatter"), ("fsdp/every", "all_gather"),
                                ("fsdp/last", "reduce_scatter"), ("fsdp/last", "all_gather")}
    assert list(by_run_kind["fsdp/every", "reduce_scatter"].y) == [12] * 6  # 3 units x k=4 micro-batches
    assert list(by_run_kind["fsdp/last", "reduce_scatter"].y) == [3] * 6  # k times fewer
    assert list(by_run_kind["ddp", "allreduce"].customdata) == pytest.approx([4.0] * 6)  # MB, in the hover
    assert "reduce-scatters" in by_run_kind["fsdp/last", "reduce_scatter"].hovertemplate
    assert "MB" in by_run_kind["fsdp/last", "reduce_scatter"].hovertemplate
    # Colour tells the runs apart, the dash the kind; one legend entry per run and one per kind.
    dashes = {kind: t.line.dash for (_, kind), t in by_run_kind.items()}
    assert len(set(dashes.values())) == 3
    assert sorted(t.name for t in figure.data if t.showlegend) == sorted(
        ["ddp", "fsdp/every", "fsdp/last", "reduce-scatter", "all-gather", "all-reduce"])
    assert not any(t.showlegend for t in lines)  # a run's entry is a plain line in its colour, not its first kind's
    assert {t.line.dash for t in figure.data if t.uid.endswith("--legend")} == {None}
    assert len({t.line.color for t in lines}) == 3
    assert figure.layout.yaxis.rangemode == "tozero" and not annotations(figure)


def test_one_process_runs_have_no_collectives_chart_only_a_line():
    figure = collectives_figure([run(5, "a")], "step")
    assert not figure.data and annotations(figure) == [NO_COLLECTIVES]
    assert "collectives" in not_applicable([run(5, "a")])
    assert "collectives" not in not_applicable([run(5, "a"), sharded_run(5, "b")])


def test_the_memory_chart_of_several_processes_is_per_rank_and_shows_what_sharding_keeps():
    every, last, ddp = sharded_run(6, "fsdp/every"), sharded_run(6, "fsdp/last", sync="last"), ddp_run(6, "ddp")
    figure = memory_figure([ddp, every, last], "step")
    assert "per rank" in figure.layout.title.text and "largest rank" in figure.layout.title.subtitle.text
    assert "per rank" in figure.layout.yaxis.title.text
    kept = {t.legendgroup: list(t.y) for t in figure.data if t.uid.endswith("--grad_kept_mb")}
    assert kept["fsdp/every"] == pytest.approx([0.0655 / 2] * 6) and kept["fsdp/last"] == pytest.approx([0.0655] * 6)
    assert set(kept) == {"ddp", "fsdp/every", "fsdp/last"}
    assert "gradients kept between micro-batches" in [t.name for t in figure.data if t.uid.startswith("key-")]
    single = memory_figure([run(6, "a")], "step")  # one process: the figures are the process's, no kept line
    assert "per rank" not in single.layout.title.text
    assert not [t for t in single.data if t.uid.endswith("--grad_kept_mb")]


def test_runs_that_call_as_many_collectives_stay_visible_under_each_other():
    every, last = sharded_run(4, "fsdp/every"), sharded_run(4, "fsdp/last", sync="last")
    figure = collectives_figure([every, last], "step")
    gathers = {t.legendgroup: t for t in figure.data if t.uid.endswith("--all_gather")}
    assert list(gathers["fsdp/every"].y) == list(gathers["fsdp/last"].y)  # the same all-gathers per step
    assert gathers["fsdp/every"].line.width > gathers["fsdp/last"].line.width  # the earlier one shows around it
    assert gathers["fsdp/last"].line.width == 2  # the line on top, like every line nothing covers
    scatters = {t.legendgroup: t.line.width for t in figure.data if t.uid.endswith("--reduce_scatter")}
    assert scatters == {"fsdp/every": 2, "fsdp/last": 2}  # 12 and 3 per step: apart, both thin

"""Live charts are built once per new batch of rows, whatever the number of pages showing them."""

from __future__ import annotations

import json
import threading

from gaccum_core.views.chart_cache import ChartCache, ChartInput, grown_frame
from gaccum_core.views.charts import CHARTS


def rows(n: int, start: int = 1) -> tuple[dict, ...]:
    return tuple({"step": i, "epoch": 0, "micro_batches": 1, "samples": 8, "samples_seen": 8 * i,
                  "loss": 2.0 / i, "lr": 0.1, "grad_norm": 1.0, "scale": None, "skipped": 0,
                  "skipped_total": 0, "mem_allocated_mb": 1.0, "mem_reserved_mb": None, "mem_peak_mb": 1.0,
                  "activation_mb": 0.1, "cache_clear_s": 0.0, "step_time_s": 0.01, "samples_per_s": 800.0,
                  "wall_time_s": 0.01 * i} for i in range(start, start + n))


def test_frames_grow_by_the_new_rows_only():
    first = grown_frame(None, rows(3))
    grown = grown_frame(first, rows(5))
    assert grown["step"].tolist() == [1, 2, 3, 4, 5]
    assert grown_frame(grown, rows(5)) is grown  # nothing new: the same frame, no conversion
    assert grown_frame(grown, rows(2))["step"].tolist() == [1, 2]  # a different run's rows: rebuilt


def test_many_pages_asking_for_the_same_rows_build_once():
    cache = ChartCache()
    run = ChartInput("r1", "mlp b=8 k=4", rows(10), ())
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(cache.charts([run], "step", 0.6)))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.builds == 1 and all(a is answers[0] for a in answers)
    assert list(answers[0].specs) == list(CHARTS)
    loss = json.loads(answers[0].specs["loss"])
    assert loss["layout"]["uirevision"] == "loss:step" and len(loss["data"]) == 2


def test_new_rows_or_new_options_build_again_and_only_then():
    cache = ChartCache()
    cache.charts([ChartInput("r1", "a", rows(10), ())], "step", 0.6)
    cache.charts([ChartInput("r1", "a", rows(10), ())], "step", 0.6)
    assert cache.builds == 1
    cache.charts([ChartInput("r1", "a", rows(12), ())], "step", 0.6)
    cache.charts([ChartInput("r1", "a", rows(12), ())], "samples_seen", 0.6)
    cache.charts([ChartInput("r1", "a", rows(12), ())], "samples_seen", 0.6, frozenset({"loss"}))
    assert cache.builds == 4


def test_identical_runs_are_reported_as_coinciding():
    cache = ChartCache()
    charts = cache.charts([ChartInput("r1", "b=32 k=4", rows(10), ()), ChartInput("r2", "b=8 k=16", rows(10), ())],
                          "step", 0.6)
    (group,) = charts.coincidences
    assert group.labels == ("b=32 k=4", "b=8 k=16") and group.max_diff == 0.0


def test_a_deleted_run_is_forgotten_and_built_afresh_if_it_reappears():
    cache = ChartCache()
    kept, deleted = ChartInput("keep", "a", rows(10), ()), ChartInput("gone", "b", rows(10), ())
    cache.charts([kept], "step", 0.6)
    cache.charts([kept, deleted], "step", 0.6)
    cache.forget(["gone"])
    cache.charts([kept], "step", 0.6)  # untouched by the deletion: still cached
    assert cache.builds == 2
    cache.charts([kept, deleted], "step", 0.6)  # its charts were dropped with it
    assert cache.builds == 3


def test_each_trace_keeps_its_uid_so_a_hidden_legend_entry_stays_with_its_run():
    # plotly.js matches a hidden legend entry to a trace by uid (by position without one); pio.to_json
    # drops uids, so a run added before another would have inherited its hidden state.
    cache = ChartCache()
    runs = [ChartInput(run_id, run_id, rows(4), ()) for run_id in ("r1", "r2")]
    loss = json.loads(cache.charts(runs, "step", 0.6).specs["loss"])
    uids = [trace.get("uid") for trace in loss["data"] if trace.get("uid")]
    assert any(uid.startswith("r1--") for uid in uids) and any(uid.startswith("r2--") for uid in uids), uids

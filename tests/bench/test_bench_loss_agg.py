"""bench_loss_agg.py --quick --json: every aggregation mode of sft and of pg, padded and packed, measured against a plain
loop of the same aggregation, whose weights end equal to the engine's; the table and one JSON line of the headline
figures."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from test_bench_device_flags import HEAD, ROOT

pytestmark = pytest.mark.multiprocess  # the benchmark runs in a fresh Python process (conftest.py)
SFT_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
PG_MODES = (*SFT_MODES, "group-mean-token-mean")
CASE = {"dataset", "mode", "packing", "plain_tokens_per_s", "exact_tokens_per_s", "textbook_tokens_per_s", "ratio_median",
        "ratio_quartiles", "to_last_step_ratio_median", "exact_over_textbook_median",
        "exact_over_textbook_quartiles", "max_weight_diff", "moved", "cpu_time_ratio_median"}


def test_quick_json_measures_every_mode_of_sft_and_pg_padded_and_packed_and_plain_and_exact_end_with_the_same_weights(
        run_bench):
    done = run_bench("bench_loss_agg", "--quick", "--json", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(figures) == HEAD | {"model", "dataset", "amp", "b", "k", "max_seq_len", "repeats", "cases",
                                   "worst_ratio_median", "same_weights", "max_weight_diff"}
    assert figures["bench"] == "loss_agg" and figures["dataset"] == ["sft", "pg"] and figures["device"] == "cpu"
    cases = figures["cases"]
    assert [(c["dataset"], c["mode"], c["packing"]) for c in cases] == [
        (d, m, p) for d, modes in (("sft", SFT_MODES), ("pg", PG_MODES)) for m in modes for p in ("off", "on")]
    assert all(set(case) == CASE for case in cases)
    assert all(c["plain_tokens_per_s"] > 0 and c["exact_tokens_per_s"] > 0 and c["ratio_median"] > 0 for c in cases)
    assert figures["same_weights"] is True and figures["max_weight_diff"] <= 1e-5
    assert min(c["moved"] for c in cases) > 1e-4  # training moved the weights: equal weights are not untrained ones
    assert figures["worst_ratio_median"] == min(c["ratio_median"] for c in cases)
    assert "same weights, plain and exact, after every repeat: yes" in done.stdout
    table = [line for line in done.stdout.splitlines() if line.startswith("| pg | group-mean-token-mean | on | ")]
    assert len(table) == 1, done.stdout


def test_a_mode_that_applies_to_none_of_the_data_sets_is_refused_in_one_line(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    bench = importlib.import_module("bench_loss_agg")
    monkeypatch.setattr(sys, "argv", ["bench_loss_agg.py", "--dataset", "sft", "--loss-agg", "group-mean-token-mean"])
    with pytest.raises(SystemExit) as ended:
        bench.main()
    assert ended.value.code == 2
    assert capsys.readouterr().err == ("bench_loss_agg.py: --loss-agg group-mean-token-mean applies to none of "
                                       "--dataset sft (group-mean-token-mean: pg only)\n")

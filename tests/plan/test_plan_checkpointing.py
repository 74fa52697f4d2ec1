"""The planner weighs activation checkpointing (issue 32): it crosses off / selective / full with the other options,
probes each on the real engine (a checkpointed candidate counts less activation memory), says the trade in numbers,
carries the choice to the run, and the CLI takes the list to cross."""

from __future__ import annotations

import json
import re

import pytest

from gaccum_core.cli.main import main
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.plan.planner import PlanRequest, config_from_plan, make_plan
from gaccum_core.plan.probe import measure
from gaccum_core.plan.ranking import checkpointing_trade, reason, recommend
from gaccum_core.plan.search import FITS, Candidate, Options, combinations

FP32 = Options()
FULL, SELECTIVE = Options(activation_checkpointing="full"), Options(activation_checkpointing="selective")
GPT = RunConfig(model="gpt", dataset="pydoc", max_seq_len=32, device="cpu", micro_batch_size=1, accum_steps=1)


def candidate(options: Options, b: int, peak: float, speed: float, e: int = 64) -> Candidate:
    return Candidate(options, b, e // b, FITS, peak, speed, b / speed, samples_per_s_error=speed * 0.01, timed_steps=5)


def test_plans_cross_checkpointing_with_the_other_options_and_name_it():
    combos = combinations(("off", "bf16"), ("off",), ("off",), ("ddp",), ("off", "selective", "full"))
    assert len(combos) == 6 and combos[0] == FP32
    assert {o.label() for o in combos} >= {"fp32 + ckpt/full", "bf16 + ckpt/selective", "fp32"}
    request = PlanRequest(GPT, 32, 10.0, activation_checkpointing=("off", "full"))
    assert [o.activation_checkpointing for o in request.options] == ["off", "full"]
    assert "fp32 + ckpt/full" in request.work_words()


def test_an_unknown_checkpointing_value_is_refused_naming_the_field():
    with pytest.raises(ConfigError) as caught:
        PlanRequest(GPT, 32, 10.0, activation_checkpointing=("off", "sometimes"))
    assert caught.value.field == "activation_checkpointing" and "off, selective, full" in str(caught.value)


def test_a_checkpointed_probe_counts_less_activation_memory_and_the_same_weights():
    off, full = (measure(GPT, options, 8, 32, 10_000.0) for options in (FP32, FULL))
    assert off.fits and full.fits
    assert full.detail["activations_mb"] < 0.7 * off.detail["activations_mb"]
    for part in ("weights_mb", "gradients_mb", "optimizer_mb"):
        assert full.detail[part] == off.detail[part]


def test_the_trade_in_numbers_when_checkpointing_wins():
    """'b=16, k=4 with full checkpointing: 1.300 ± 0.018× the samples/s of b=4, k=16 without, at 82% of the budget'
    (each speed ± 1 %: the ratio ± 1.3·√2 %)."""
    budget = 100.0
    candidates = [candidate(FP32, 4, 80.0, 1000.0), candidate(FP32, 2, 45.0, 700.0),
                  candidate(FULL, 16, 82.0, 1300.0), candidate(FULL, 8, 50.0, 1150.0)]
    choice = recommend(candidates, budget)
    assert choice is candidates[2]
    text = reason(choice, candidates, budget)
    assert ("b=16, k=4 with full checkpointing: 1.300 ± 0.018× the samples/s of b=4, k=16 without, at 82% of the budget"
            in text)


def test_the_trade_in_numbers_when_checkpointing_loses_or_ties():
    budget = 100.0
    candidates = [candidate(FP32, 16, 80.0, 1000.0), candidate(FULL, 32, 60.0, 750.0)]
    text = reason(recommend(candidates, budget), candidates, budget)
    assert text.startswith("fp32 at b=16, k=4")
    assert "full checkpointing fits b=32, k=2 at 60% of the budget, at 0.750 ± 0.011× the samples/s" in text
    tied = [candidate(FP32, 4, 80.0, 1000.0), candidate(FULL, 8, 60.0, 1005.0)]
    assert "with full checkpointing: as fast as b=4, k=16 without" in reason(recommend(tied, budget), tied, budget)
    alone = [candidate(FULL, 8, 60.0, 900.0)]
    assert checkpointing_trade(alone[0], alone, budget) == ""  # nothing to compare with: nothing said


def test_without_checkpointing_nothing_fitting_is_said():
    budget = 100.0
    only = [candidate(FULL, 8, 60.0, 900.0), candidate(SELECTIVE, 4, 70.0, 800.0)]
    text = checkpointing_trade(only[0], only, budget)
    assert "without checkpointing no size of these options fits with the 10% margin" in text


def test_a_real_plan_chooses_checkpointing_where_it_fits_a_larger_faster_micro_batch_and_the_run_keeps_it():
    """gpt on pydoc, E=64 in 3 MB: without checkpointing only b=2 fits the margin, with full b=8 does; one
    thread's samples/s grows with b, so the plan chooses full checkpointing and says by how much (measured: 1.30×)."""
    plan = make_plan(PlanRequest(GPT, 64, 3.0, activation_checkpointing=("off", "full")))
    largest = plan.largest_fitting()
    assert largest["fp32 + ckpt/full"] > largest["fp32"]
    choice = plan.recommended
    print("\n" + plan.reason)
    if choice.options.activation_checkpointing == "full":
        assert re.search(rf"b={choice.micro_batch_size}, k={choice.accum_steps} with full checkpointing: "
                         r"(\d\.\d+ ± \d\.\d+×( \(interval wider than the value\))? the samples/s of|as fast as) b=\d+, k=\d+ "
                         r"without, at \d+% of the budget",
                         plan.reason)
    else:  # a loaded machine can turn the speeds: the sentence then says what checkpointing would have fitted
        assert re.search(r"full checkpointing fits b=\d+, k=\d+ at \d+% of the budget", plan.reason)
    run = config_from_plan(GPT, plan)
    assert run.activation_checkpointing == choice.options.activation_checkpointing
    assert (run.micro_batch_size, run.accum_steps) == (choice.micro_batch_size, choice.accum_steps)


def _cli(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own errors
        return exc.code


def test_the_cli_crosses_the_checkpointing_list_and_prints_the_flag_to_run_with(capsys):
    command = ["plan", "--model", "gpt", "--dataset", "pydoc", "--max-seq-len", "32", "--effective-batch", "16",
               "--memory-budget-mb", "3", "--time-cap-s", "0.2", "--activation-checkpointing", "off,full"]
    assert _cli(command) == 0
    out = capsys.readouterr().out
    assert "fp32 + ckpt/full" in out and "--activation-checkpointing " in out
    assert _cli(command + ["--json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert {row["activation_checkpointing"] for row in as_json["rows"]} == {"off", "full"}
    assert as_json["options"]["activation_checkpointing"] in ("off", "full")
    assert _cli(command[:-1] + ["off,often"]) == 2
    err = capsys.readouterr().err
    assert "activation" in err and "often" in err and "Traceback" not in err

"""What a plan says on the page, written by the planner: how much a request will measure (memory probes,
timed sizes) before anything runs, the plan's heading and its closing line."""

from __future__ import annotations

from gaccum_core.config import RunConfig
from gaccum_core.plan.planner import Plan, PlanRequest, default_request
from gaccum_core.plan.search import FITS, Candidate, Options

BASE = RunConfig(model="cnn", dataset="fake", image_size=32, micro_batch_size=1, accum_steps=1)


def test_the_default_request_counts_five_probes_and_two_timed_sizes_per_combination():
    request = default_request()  # E=256: 9 divisors, but about 5 probes when memory is linear
    assert (request.probe_count, request.timed_count) == (4 * 5, 4 * 2)
    assert request.work_words() == (
        "Plan crosses 4 option combinations: fp32, fp32 + clear/step, bf16, bf16 + clear/step: about 20 memory "
        f"probes, then 8 sizes timed in turns, about {request.time_cap_s:g} s each.")


def test_one_combination_is_said_in_the_singular():
    request = PlanRequest(BASE, 4, 32.0, amp=("bf16",))  # E=4: 1, 2, 4 are the only sizes to probe
    assert request.work_words() == ("Plan crosses 1 option combination: bf16: about 3 memory probes, then 2 sizes "
                                    f"timed in turns, about {request.time_cap_s:g} s each.")


def test_sharded_modes_are_probed_once_with_ddp_and_never_timed():
    request = PlanRequest(BASE, 64, 32.0, sharding=("ddp", "fsdp/every", "fsdp/last"), world_size=2)
    assert request.probe_count == 5 and request.timed_count == 2  # the ddp probes serve the fsdp modes
    words = request.work_words()
    assert words.startswith("Plan crosses 3 option combinations over 2 ranks, E / N = 32 each: fp32, "
                            "fp32 + fsdp/every, fp32 + fsdp/last: about 5 memory probes, then 2 sizes timed")
    assert words.endswith(" The fsdp modes are counted per rank from the same probes, not timed.")


def test_only_sharded_modes_still_count_their_probes_and_time_nothing():
    request = PlanRequest(BASE, 64, 32.0, sharding=("fsdp/every",), world_size=2)
    assert (request.probe_count, request.timed_count) == (5, 0)
    assert "then 0 sizes timed" in request.work_words()


def test_a_plan_titles_itself_and_says_what_it_measured():
    single = Plan(default_request(), "cpu", "counted", seconds=3.21)
    assert single.title() == "cnn on fake, E=256, budget 32 MB, sgd, on cpu"
    fits = Candidate(Options(), 8, 32, FITS, 1.0)
    single.candidates = [fits, Candidate(Options(), 16, 16, FITS, 2.0, samples_per_s=100.0, timed_steps=5)]
    assert single.done_words() == "done: 2 candidates measured, 1 of them timed, in 3.2 s"
    ranked = Plan(PlanRequest(BASE, 64, 0.5, world_size=2), "cuda:0", "allocator")
    assert ranked.title() == "cnn on fake, E=64 over 2 ranks, budget 0.5 MB per rank, sgd, on cuda:0"

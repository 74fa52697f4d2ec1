"""The sweep's spec, pure: grid expansion, k derived from E, the id, run names, lanes per GPU, the 95 % t."""

import math

import pytest

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.sweeps.checks import check_axes
from gaccum_core.sweeps.commands import config_flags
from gaccum_core.sweeps.devices import lanes
from gaccum_core.sweeps.labels import cell_label, describe_sweep
from gaccum_core.sweeps.spec import SweepSpec, cells, parse_run_name, same_run, sweep_runs
from gaccum_core.sweeps.stats import mean_ci, steady_median, t_975

COMMON = (("model", "mlp"), ("device", "cpu"), ("seed", 5))


def spec(**changes):
    values = dict(grid=(("micro_batch_size", (8, 16, 32)), ("amp", ("off", "bf16"))), common=COMMON, repeats=3,
                  effective_batch=64)
    return SweepSpec(**{**values, **changes})


def test_every_cell_crossed_with_k_derived_from_the_effective_batch():
    found = cells(spec())
    assert [(c.config.micro_batch_size, c.config.amp) for c in found] == [
        (8, "off"), (8, "bf16"), (16, "off"), (16, "bf16"), (32, "off"), (32, "bf16")]
    assert all(c.config.micro_batch_size * c.config.accum_steps == 64 for c in found)
    assert all(c.config.model == "mlp" for c in found)
    assert cell_label(found[1], spec()) == "b=8 k=8 bf16"
    assert describe_sweep(spec()) == "mlp on ?, E=64: b × amp, 3 repeats (18 runs)"


def test_repeats_take_seed_seed_plus_one_or_the_same_seed():
    runs = sweep_runs(spec())
    assert len(runs) == 6 * 3
    assert [r.config.seed for r in runs[:3]] == [5, 6, 7]
    assert {r.config.seed for r in sweep_runs(spec(same_seed=True))} == {5}
    names = {r.name for r in runs}
    assert len(names) == len(runs)
    assert parse_run_name(runs[4].name) == (spec().sweep_id, runs[4].cell, runs[4].repeat)
    assert parse_run_name("baseline") is None


def test_the_id_follows_the_spec_and_nothing_else():
    assert spec().sweep_id == spec().sweep_id
    ids = {spec().sweep_id, spec(repeats=2).sweep_id, spec(same_seed=True).sweep_id, spec(effective_batch=32).sweep_id,
           spec(common=COMMON + (("lr", 0.1),)).sweep_id,
           spec(grid=(("micro_batch_size", (8, 16)), ("amp", ("off", "bf16")))).sweep_id}
    assert len(ids) == 6
    # a common setting left at RunConfig's own default does not enter the id: a field added later keeps ids
    assert spec(common=COMMON + (("grad_clip", 0.0),)).sweep_id == spec().sweep_id


@pytest.mark.parametrize("changes,field", [
    (dict(grid=(("micro_batch_size", (8, 24)),)), "micro_batch_size"),  # 24 does not divide 64
    (dict(grid=(("amp", ()),)), "amp"),
    (dict(grid=(("amp", ("off", "off")),)), "amp"),
    (dict(grid=(("accum_steps", (2, 4)),)), "accum_steps"),  # derived from E
    (dict(repeats=0), "repeats"),
    (dict(effective_batch=0), "effective_batch"),
    (dict(grid=(("amp", ("off", "fp8")),)), "amp"),
    (dict(grid=(("lr", (0.1, 0.0)),)), "lr"),
])
def test_a_bad_grid_is_refused_naming_its_field(changes, field):
    with pytest.raises(ConfigError) as refused:
        cells(spec(**changes))
    assert refused.value.field == field


def test_the_seed_is_crossed_only_where_a_repeat_cannot_take_another_cells_seed():
    seeds = (("seed", (0, 1)),)
    with pytest.raises(ConfigError) as refused:
        check_axes(spec(grid=seeds, repeats=2))  # cell seed=0's second repeat would be cell seed=1's first
    assert refused.value.field == "seed" and refused.value.value == "0,1"
    for allowed in (spec(grid=seeds, repeats=1), spec(grid=seeds, repeats=2, same_seed=True)):
        check_axes(allowed)
        runs = [(r.cell, r.config.seed) for r in sweep_runs(allowed)]
        assert len({seed for _, seed in runs}) == 2 and {cell for cell, _ in runs} == {0, 1}
        assert all(seed == cell for cell, seed in runs)  # each cell trains its own seed, and only it


def test_where_a_run_runs_or_reads_and_what_it_writes_are_not_axes():
    with pytest.raises(ConfigError) as refused:
        check_axes(spec(grid=(("data_dir", ("a", "b")),)))
    assert refused.value.field == "data_dir" and "one value" in refused.value.allowed
    check_axes(spec(grid=(("lr", (0.01, 0.05)), ("optimizer", ("sgd", "adamw")))))


def test_an_axis_that_changes_no_run_is_refused_naming_it():
    with pytest.raises(ConfigError) as refused:  # init_scale is fp16's alone: with amp off it changes no run
        check_axes(spec(grid=(("init_scale", (1024.0, 65536.0)),)))
    assert refused.value.field == "init_scale" and "changes no run" in refused.value.allowed
    found = check_axes(spec(grid=(("amp", ("off", "fp16")), ("init_scale", (1024.0, 65536.0)))))
    assert [(c.config.amp, c.config.init_scale) for c in found] == [
        ("off", 1024.0), ("off", 65536.0), ("fp16", 1024.0), ("fp16", 65536.0)]  # it changes the fp16 cells


def test_a_run_on_another_device_is_the_same_run():
    config = RunConfig(model="mlp")
    assert same_run(config, config.replace(device="cuda:1"))
    assert not same_run(config, config.replace(seed=1))


def test_config_flags_give_back_the_config():
    from gaccum_core.cli.main import build_parser
    from gaccum_core.cli.args import config_from_args

    config = RunConfig(model="mlp", micro_batch_size=8, accum_steps=8, amp="bf16", lr=0.1, no_dropout=True,
                       device="cpu", epochs=2)
    args = build_parser().parse_args(["run", *config_flags(config)])
    assert config_from_args(args) == config


def test_one_lane_without_gpus_and_one_run_per_gpu_with_several():
    configs = [RunConfig(model="mlp", seed=s) for s in range(5)] + [RunConfig(model="mlp", nproc=2)]
    assert [[(lane.device, lane.runs) for lane in phase] for phase in lanes(configs, 0)] == [[(None, (0, 1, 2, 3, 4, 5))]]
    assert lanes(configs, 1) == lanes(configs, 0)
    phases = lanes(configs, 2)
    assert [(lane.device, lane.runs) for lane in phases[0]] == [("cuda:0", (0, 2, 4)), ("cuda:1", (1, 3))]
    assert [(lane.device, lane.runs) for lane in phases[1]] == [(None, (5,))]  # the DDP run takes every GPU, after
    pinned = [RunConfig(model="mlp", device="cpu")] * 2
    assert [[lane.device for lane in phase] for phase in lanes(pinned, 4)] == [[None]]


def test_the_t_quantiles_match_their_closed_forms():
    assert t_975(1) == pytest.approx(math.tan(math.pi * (0.975 - 0.5)), rel=1e-4)  # Cauchy
    assert t_975(2) == pytest.approx(0.95 / math.sqrt(2 * 0.975 * 0.025), rel=1e-4)
    quantiles = [t_975(d) for d in range(1, 200)]
    assert quantiles == sorted(quantiles, reverse=True) and quantiles[-1] == pytest.approx(1.96)


def test_mean_ci_and_the_median_after_warm_up():
    mean, ci = mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0 and ci == pytest.approx(t_975(2) * 1.0 / math.sqrt(3))
    assert math.isnan(mean_ci([4.0])[1]) and mean_ci([4.0])[0] == 4.0
    assert all(math.isnan(v) for v in mean_ci([]))
    assert steady_median([1000.0] + [10.0] * 9) == 10.0  # the first step (compilation, warm-up) left out

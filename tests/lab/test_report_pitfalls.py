"""The four post-training reports as pitfalls: each report's first-window gradient against the exact loop's, pinned to
the figure the report predicts from the data's token counts (counted here), the exact loop against one big batch
written here, the dropped window's samples, and the drift over SGD steps."""

import json

import pytest
import torch
import torch.nn.functional as F

from gaccum_core.config import ConfigError
from gaccum_core.data.load import load_data
from gaccum_core.data.records import BUNDLED
from gaccum_core.data.sequences import IGNORE
from gaccum_core.lab.mistakes import mistake
from gaccum_core.lab.pitfalls.catalog import REPORT_PITFALLS, case_config, pitfall
from gaccum_core.lab.pitfalls.reports import REPORT_COLUMNS, run_reports
from gaccum_core.models.build import build_seeded_model
from gaccum_core.train.weighting import sample_order

STEPS = 2
CONFIG = case_config("ms_swift_k_twice")  # the four share their settings
B, K = CONFIG.micro_batch_size, CONFIG.accum_steps
WINDOW = B * K


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The four cases, and the data they trained on (a token cache of this module's own)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GACCUM_CACHE_DIR", str(tmp_path_factory.mktemp("token-cache")))
        return run_reports(STEPS), load_data(CONFIG)


@pytest.fixture(scope="module")
def cases(run):
    return run[0]


@pytest.fixture(scope="module")
def train(run):
    return run[1].train


def _train_records() -> list[dict]:
    """The bundled rollouts of the training split, in order: groups not held out (group g: g % 10 != 0)."""
    records = [json.loads(line) for line in (BUNDLED / "pg.jsonl").read_text(encoding="utf-8").splitlines()]
    return [r for r in records if int(r["group"][1:]) % 10]


def _loss_tokens(train, indices: torch.Tensor) -> int:
    """Targets that are not IGNORE in these samples' batch: their loss tokens."""
    return int((train.batch(indices)[1] != IGNORE).sum())


def test_the_four_reports_in_order_each_naming_its_report_and_mistake(cases):
    assert list(cases) == ["verl_sample_share", "trl_generation_batch", "ms_swift_k_twice",
                           "mlx_lm_micro_batch_means"] == list(REPORT_PITFALLS)
    for key, case in cases.items():
        found = pitfall(key)
        assert any(found.title.startswith(report + ":") for report in mistake(found.mistake).reports), found.title
        assert len(found.explanation.splitlines()) == 2 and "\n" not in found.fix
        assert list(case.frame.columns) == REPORT_COLUMNS and case.frame["step"].tolist() == [1, 2]


def test_ms_swift_divides_by_k_twice_exactly_1_over_k(cases):
    case = cases["ms_swift_k_twice"]
    assert abs(case.grad_ratio - 1 / K) <= 1e-6 and case.cosine > 1 - 1e-6
    assert case.lr_factor == case.grad_ratio


def test_trl_scales_by_window_tokens_over_generation_batch_tokens(cases, train):
    order = sample_order(CONFIG, train, 0)
    first, second = _loss_tokens(train, order[:WINDOW]), _loss_tokens(train, order[WINDOW:2 * WINDOW])
    predicted = first / (first + second)
    assert abs(predicted - 0.5) > 0.01  # uneven windows: the scale is the ratio, not 1/2
    case = cases["trl_generation_batch"]
    assert abs(case.grad_ratio - predicted) <= 1e-6 and case.cosine > 1 - 1e-6
    assert case.predicted_scale == pytest.approx(predicted, abs=1e-12) and case.lr_factor == case.grad_ratio


@pytest.mark.parametrize("key", ["verl_sample_share", "mlx_lm_micro_batch_means"])
def test_the_reweighting_reports_turn_the_gradient(cases, key):
    case = cases[key]
    assert case.cosine < 1 - 1e-3
    assert case.lr_factor is None and case.predicted_scale is None


def test_mlx_lm_never_trains_the_epochs_last_partial_window(cases):
    dropped = len(_train_records()) % WINDOW
    assert dropped > 0
    assert cases["mlx_lm_micro_batch_means"].never_trained == dropped
    assert [c.never_trained for key, c in cases.items() if key != "mlx_lm_micro_batch_means"] == [0, 0, 0]


def test_each_report_drifts_from_the_exact_loop(cases):
    for key, case in cases.items():
        assert case.frame["drift"].gt(1e-3).all(), key


def test_the_exact_loop_is_one_big_batch_on_either_cut(run, cases):
    """The first window's 20 rollouts as one batch: Σ over every loss token of -A·log p, A read from the file, over
    their count; its gradient against the exact loop's on b samples a micro-batch and on verl's token budget."""
    data, records = run[1], _train_records()
    model = build_seeded_model(CONFIG, data.input_shape, data.num_classes)
    indices = sample_order(CONFIG, data.train, 0)[:WINDOW]
    x, y = data.train.batch(indices)
    nll = F.cross_entropy(model(x).float().transpose(1, 2), y, ignore_index=IGNORE, reduction="none")
    advantages = torch.tensor([records[i]["advantage"] for i in indices.tolist()]).view(-1, 1)
    assert advantages.abs().sum() > 0 and len(set(advantages.flatten().tolist())) > 2
    ((advantages * nll).sum() / (y != IGNORE).sum()).backward()
    expected = torch.cat([p.grad.flatten() for p in model.parameters()]).double()
    for key in ("ms_swift_k_twice", "verl_sample_share"):
        assert (cases[key].exact_gradient - expected).abs().max().item() <= 1e-6, key


@pytest.mark.parametrize("steps", [0, -1, 1.5, True])
def test_steps_other_than_a_positive_integer_are_refused_in_one_line(steps):
    with pytest.raises(ConfigError, match="steps") as refused:
        run_reports(steps)
    assert "\n" not in str(refused.value) and "integer ≥ 1" in str(refused.value)

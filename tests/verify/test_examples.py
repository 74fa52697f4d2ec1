"""verify on code nobody here wrote: examples/verify/'s six loops give the verdicts docs/verify.md's table states,
with the installed transformers, accelerate and Lightning, so that a version that changes one is noticed here. Each
runs in a temporary working folder and temporary-files folder, which must be left empty."""

import tempfile
from importlib.metadata import version
from pathlib import Path

import pytest

from gaccum_core.verify.check import check_loop
from gaccum_core.verify.loop import load_loop
from gaccum_core.verify.report import VerifyReport

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "verify"
FIXED_K = 4  # the configured accumulation steps of the Trainer, Accelerator and Lightning examples (--fixed-k 4)
LIBRARIES = {"hf_trainer": "transformers", "accelerate_recipe": "accelerate", "lightning_loop": "lightning"}


@pytest.fixture
def nothing_written(tmp_path, monkeypatch):
    """The check's working folder and tempfile's folder, both under tmp_path; asserts after that they are empty
    (but for torch's own compile cache folder, which importing torch._dynamo makes in the temporary-files folder)."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    yield
    torchs = {p for cache in temporary.glob("torchinductor_*") for p in (cache, *cache.rglob("*"))}
    assert sorted(str(p.relative_to(tmp_path)) for p in set(tmp_path.rglob("*")) - torchs) == ["tmp"]


def _verify(example: str, fixed_k: int | None = None, splits: list[tuple[int, ...]] | None = None) -> VerifyReport:
    """check_loop on the example's own setup, window and objective, on the splits (None: the default ones)."""
    loop = load_loop(str(EXAMPLES / f"{example}.py"))
    model, batch = loop.setup()
    return check_loop(loop.window, model, batch, splits=splits, fixed_k=fixed_k, objective=loop.objective)


def test_token_means_divided_by_k_are_diagnosed_as_micro_batches_weighted_equally(nothing_written):
    report = _verify("plain_loop_mean_of_means")
    assert not report.invariant and report.mistake == "micro_batches_weighted_equally"
    assert report.residual < 1e-4 and report.factor == pytest.approx(1, rel=1e-3)


def test_the_same_loop_with_gaccums_rule_passes(nothing_written):
    report = _verify("plain_loop_gaccum_rule")
    assert report.passed and report.matches_objective and report.mistake is None


def test_the_transformers_trainer_counting_num_items_in_batch_passes(nothing_written):
    report = _verify("hf_trainer", FIXED_K)
    assert report.passed and report.matches_objective and report.mistake is None
    assert report.splits[0].sizes == (2, 2, 2, 2) and (1, 7) in [s.sizes for s in report.splits]


@pytest.mark.parametrize("example", ["accelerate_recipe", "lightning_loop"])
def test_a_mean_loss_over_the_configured_k_is_diagnosed_as_means_over_the_fixed_k(example, nothing_written):
    report = _verify(example, FIXED_K)
    assert not report.invariant and report.mistake == "means_over_fixed_k" and report.residual < 1e-4
    scales = {s.sizes: s.scale for s in report.splits}  # projected on the objective's gradient
    assert scales[(2, 2, 2, 2)] == pytest.approx(1, rel=1e-4)  # a full window of equal micro-batches is exact
    assert scales[(8,)] == pytest.approx(1 / FIXED_K, rel=1e-4)  # one micro-batch's mean, divided by K all the same
    assert scales[(4, 4)] == pytest.approx(2 / FIXED_K, rel=1e-4)
    uneven = _verify(example, FIXED_K, splits=[(2, 2, 2, 2), (1, 2, 2, 3)])  # two full windows differ all the same:
    assert not uneven.invariant and uneven.mistake == "micro_batches_weighted_equally"  # whatever its samples


def test_a_policy_gradient_token_mean_scaled_by_sample_share_is_named_as_verl_5625_reports_it(nothing_written):
    """-A · log p, each micro-batch's token mean times its share of the window's samples: weighted_by_sample_share.
    The same loss summed per micro-batch over the window's loss tokens passes, and matches the objective."""
    report = _verify("grpo_sample_share")
    assert not report.invariant and report.mistake == "weighted_by_sample_share"
    assert report.residual < 1e-4 and report.factor == pytest.approx(1, rel=1e-3)
    loop = load_loop(str(EXAMPLES / "grpo_sample_share.py"))
    token_losses = loop.window.__globals__["token_losses"]  # the example's own -A · log p

    def fixed(model, micro_batches):
        tokens = sum(int((micro["labels"][:, 1:] != -100).sum()) for micro in micro_batches)
        for micro in micro_batches:
            (token_losses(model, micro)[0].sum() / tokens).backward()
    model, batch = loop.setup()
    report = check_loop(fixed, model, batch, objective=loop.objective)
    assert report.passed and report.matches_objective and report.mistake is None


def test_the_docs_table_names_each_example_with_the_installed_version():
    text = (ROOT / "docs" / "verify.md").read_text().split("## Verdicts on code nobody here wrote")[1]
    rows = {line.split("|")[1].strip(" `"): line.lower().replace("`", "") for line in text.splitlines()
            if line.startswith("| `")}
    assert set(rows) == {p.name for p in EXAMPLES.glob("*.py")}
    stale = [f"{name}: {library} {version(library)}" for name, library in LIBRARIES.items()
             if f"{library} {version(library)}" not in rows[f"{name}.py"]]
    assert not stale, stale

"""The coincidence verdict, pure: which cells are compared, with what, and what the verdict says."""

import math

from gaccum_core.config import RunConfig
from gaccum_core.sweeps.coincidence import relative_gap, verdicts

BASE = RunConfig(model="mlp")
CONFIGS = {0: BASE.replace(micro_batch_size=8, accum_steps=8), 1: BASE.replace(micro_batch_size=32, accum_steps=2),
           2: BASE.replace(micro_batch_size=16, accum_steps=2),  # another effective batch: compared with none
           3: BASE.replace(micro_batch_size=8, accum_steps=8, reduction="mean_per_micro_batch"),
           4: BASE.replace(micro_batch_size=32, accum_steps=2, reduction="mean_per_micro_batch")}
LABELS = {cell: f"cell {cell}" for cell in CONFIGS}
LOSS = [2.3, 1.9, 1.2, 0.8]


def test_cells_differing_only_in_b_and_k_are_compared_repeat_by_repeat():
    losses = {(0, 0): LOSS, (1, 0): [v * (1 + 1e-7) for v in LOSS], (2, 0): LOSS,
              (3, 0): LOSS, (4, 0): LOSS[:3] + [0.9], (0, 1): LOSS, (1, 1): LOSS}
    found = {v.cells: v for v in verdicts(CONFIGS, LABELS, losses)}
    assert set(found) == {(0, 1), (3, 4)}
    assert found[(0, 1)].coincide and found[(0, 1)].expected
    assert "coincide, as exact accumulation promises" in found[(0, 1)].text()
    differing = found[(3, 4)]
    assert not differing.coincide and not differing.expected
    assert differing.largest == ("cell 4", relative_gap(LOSS, LOSS[:3] + [0.9])[0], 4)
    assert "do not coincide" in differing.text() and "at step 4" in differing.text()


def test_an_unexpected_difference_is_said_to_be_one():
    losses = {(0, 0): LOSS, (1, 0): LOSS[:2] + [1.3, 0.8]}
    (verdict,) = verdicts(CONFIGS, LABELS, losses)
    assert verdict.expected and not verdict.coincide and "they must coincide" in verdict.text()


def test_cells_without_a_done_run_are_not_judged_yet():
    assert verdicts(CONFIGS, LABELS, {(0, 0): LOSS}) == []
    (verdict,) = verdicts(CONFIGS, LABELS, {(0, 0): LOSS, (1, 1): LOSS})  # no repeat in common
    assert math.isinf(verdict.diffs[0]) and "not comparable" in verdict.text()

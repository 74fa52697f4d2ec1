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


def test_text_cells_are_explained_by_their_packing():
    text = RunConfig(model="gpt", dataset="pydoc", reduction="mean_per_micro_batch", max_seq_len=32)
    configs = {0: text.replace(micro_batch_size=2, accum_steps=8), 1: text.replace(micro_batch_size=8, accum_steps=2),
               2: text.replace(micro_batch_size=2, accum_steps=8, packing="on"),
               3: text.replace(micro_batch_size=8, accum_steps=2, packing="on")}
    apart = LOSS[:3] + [0.9]
    found = {v.cells: v for v in verdicts(configs, LABELS, {(0, 0): LOSS, (1, 0): apart, (2, 0): LOSS, (3, 0): LOSS})}
    padded, packed = found[(0, 1)], found[(2, 3)]
    assert not padded.coincide and not padded.surprising
    assert "micro-batches holding different numbers of target tokens equally" in padded.text()
    assert packed.coincide and not packed.expected and not packed.surprising  # packing explains it: not flagged
    assert "packed, every full micro-batch holds as many target tokens" in packed.text()
    images = verdicts(CONFIGS, LABELS, {(3, 0): LOSS, (4, 0): LOSS})[0]  # the textbook on images, together
    assert images.surprising and "no partial window made them differ" in images.text()

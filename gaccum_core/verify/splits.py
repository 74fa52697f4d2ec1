"""Which ways verify splits one batch: `--splits 12/6,6/1,11` (splits between slashes, micro-batch sizes between
commas), or the default set."""

from __future__ import annotations

import random

from gaccum_core.verify.loop import VerifyError

Split = tuple[int, ...]  # the micro-batch sizes, in order; they add up to the batch's samples
ONE_EACH_UP_TO = 16  # the split into single samples is tried on batches up to this size


def parse_splits(text: str, batch_size: int) -> list[Split]:
    """The splits `text` names, each adding up to batch_size; VerifyError in one line otherwise."""
    splits = []
    for part in text.split("/"):
        try:
            split = tuple(int(size) for size in part.split(","))
        except ValueError:
            raise _refused(text, f"positive integers separated by commas, splits by slashes (12/6,6/1,11); "
                                 f"{part.strip()!r} is not") from None
        if min(split) < 1 or sum(split) != batch_size:
            raise _refused(text, f"micro-batch sizes ≥ 1 adding up to the batch's {batch_size} samples; "
                                 f"{part.strip()!r} adds up to {sum(split)}")
        splits.append(split)
    return _unique(splits)


def default_splits(batch_size: int, seed: int = 0) -> list[Split]:
    """The whole batch, halves, [1, B−1], [B−1, 1], one sample each (B ≤ 16), one seeded uneven three-way split."""
    b = batch_size
    splits: list[Split] = [(b,), (b // 2, b - b // 2), (1, b - 1), (b - 1, 1)]
    if b <= ONE_EACH_UP_TO:
        splits.append((1,) * b)
    if b >= 4:  # three parts, not all equal
        rng = random.Random(seed)
        cuts = sorted(rng.sample(range(1, b), 2))
        while len({cuts[0], cuts[1] - cuts[0], b - cuts[1]}) == 1:
            cuts = sorted(rng.sample(range(1, b), 2))
        splits.append((cuts[0], cuts[1] - cuts[0], b - cuts[1]))
    return _unique(splits)


def within_fixed_k(splits: list[Split], fixed_k: int, batch_size: int) -> list[Split]:
    """The splits a loop configured for fixed_k micro-batches can take (at most fixed_k), with one full window of
    fixed_k nearly equal micro-batches first when the batch holds that many samples."""
    full = [(batch_size // fixed_k + 1,) * (batch_size % fixed_k) +
            (batch_size // fixed_k,) * (fixed_k - batch_size % fixed_k)] if fixed_k <= batch_size else []
    return _unique(full + [split for split in splits if len(split) <= fixed_k])


def check_fixed_k(splits: list[Split], fixed_k: int) -> None:
    """VerifyError naming the first split of more than fixed_k micro-batches (no window of the loop holds them)."""
    longer = [split for split in splits if len(split) > fixed_k]
    if longer:
        raise VerifyError(f"splits={describe(longer[0])!r} is not allowed with fixed_k={fixed_k}: at most "
                          f"{fixed_k} micro-batches, the window the loop is configured for")


def describe(split: Split) -> str:
    """'6,6': the split as --splits writes it."""
    return ",".join(map(str, split))


def _refused(text: str, allowed: str) -> VerifyError:
    return VerifyError(f"splits={text!r} is not allowed: {allowed}")


def _unique(splits: list[Split]) -> list[Split]:
    return list(dict.fromkeys(splits))

"""A mean and the half-width of its 95 % interval (Student's t), written for every table in one place:
'4,338 ± 41,000 samples/s', and, when the interval is wider than the value, how many measurements (a
sweep's repeats, a plan's timed steps) would make it mean something. Pure."""

from __future__ import annotations

import math

# Student's t, two-sided 95 % (the 0.975 quantile), by degrees of freedom; between rows the next smaller
# row's value is used (a slightly wider interval), beyond the last the normal's 1.96.
T_975 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 6: 2.4469, 7: 2.3646, 8: 2.3060, 9: 2.2622,
         10: 2.2281, 11: 2.2010, 12: 2.1788, 13: 2.1604, 14: 2.1448, 15: 2.1314, 16: 2.1199, 17: 2.1098,
         18: 2.1009, 19: 2.0930, 20: 2.0860, 21: 2.0796, 22: 2.0739, 23: 2.0687, 24: 2.0639, 25: 2.0595,
         26: 2.0555, 27: 2.0518, 28: 2.0484, 29: 2.0452, 30: 2.0423, 40: 2.0211, 60: 2.0003, 120: 1.9799}
NORMAL_975 = 1.9600
# The precision the words ask for: an interval within ±50 % of its value tells at least the value's size;
# one wider than the value (a speed "between 0 and 10 times this") tells nothing.
USEFUL = 0.5


def t_975(dof: int) -> float:
    """The 0.975 quantile of Student's t with `dof` degrees of freedom (1 or more)."""
    if dof < 1:
        raise ValueError(f"dof={dof} is not allowed: at least 1")
    if dof > max(T_975):
        return NORMAL_975
    return T_975[max(d for d in T_975 if d <= dof)]


def count_for(mean: float, half: float, count: int, within: float = USEFUL) -> int | None:
    """How many measurements would bring the 95 % interval within ±`within` of the mean if they spread as the
    `count` measured did: the least n with t(n-1)·s/√n ≤ within·|mean|, s the standard deviation the
    half-width implies (half·√count / t(count-1)). None when it cannot be told (fewer than two, a mean of 0)."""
    if count < 2 or mean == 0 or not math.isfinite(half):
        return None
    spread, target = half * math.sqrt(count) / t_975(count - 1), within * abs(mean)
    for n in range(2, max(T_975) + 2):
        if t_975(n - 1) * spread / math.sqrt(n) <= target:
            return n
    return max(max(T_975) + 2, math.ceil((NORMAL_975 * spread / target) ** 2))  # t is the normal's from here


def wide_words(mean: float, half: float, count: int | None, counted: str = "repeat") -> str:
    """'' when the interval is no wider than the value; else 'interval wider than the value: about 20 repeats
    would bring it within ±50 %' (the estimate left out when `count` cannot give one)."""
    if not half > abs(mean):
        return ""
    needed = None if count is None else count_for(mean, half, count)
    if needed is None:
        return "interval wider than the value"
    return f"interval wider than the value: about {needed:,} {counted}s would bring it within ±{USEFUL * 100:g} %"


def _two_digits(half: float) -> tuple[str, int]:
    """The half-width to two significant digits ('41,000', '3.7', '0.050') and the decimals it shows."""
    if half == 0:
        return "0", 0
    places = max(0, 1 - math.floor(math.log10(half)))
    return f"{round(half, 1 - math.floor(math.log10(half))):,.{places}f}", places


def plus_minus(value: float | None, half: float | None, unit: str = "", digits: int | None = None,
               count: int | None = None, counted: str = "repeat") -> str:
    """'4,338 ± 41,000 samples/s (interval wider than the value: about 20 repeats would bring it within ±50 %)':
    the half-width to two significant digits, the value to `digits` decimals (None: to the half-width's place),
    the words when the interval is wider than the value (`count` measurements of `counted`). The value alone
    when there is no interval (None, NaN), followed by '(1 step)' when one measurement left it unknown (inf);
    '' for no value."""
    if value is None or not math.isfinite(value):
        return ""
    tail = f" {unit}" if unit else ""
    if half is None or math.isnan(half) or math.isinf(half):
        alone = f"{value:,.{digits or 0}f}{tail}"
        return alone + (f" (1 {counted})" if half is not None and math.isinf(half) else "")
    shown, places = _two_digits(half)
    text = f"{value:,.{places if digits is None else digits}f} ± {shown}{tail}"
    words = wide_words(value, half, count, counted)
    return f"{text} ({words})" if words else text

"""Numbers and numeric conditions as people read them: no scientific notation, whole thresholds on whole numbers.

A learner splits an integer attribute (an age in years, a count: `NumericAttribute.integer`) at a
midpoint such as 30.47; ``age <= 30.47`` admits exactly the ages ``age <= 30``, so that is what
`numeric_condition` prints: the same set of admissible values, written with the whole numbers it
admits. Other attributes keep their thresholds, written by `plain_number` without an exponent.
"""

from __future__ import annotations

import math

from modelshare.common.data.schema import NumericAttribute
from modelshare.common.trees.tree import Interval

__all__ = ["grouped", "integer_span", "numeric_condition", "plain_number"]


def plain_number(value: float) -> str:
    """``value`` without scientific notation: whole numbers whole, 4 significant digits below 1000, one decimal
    from 1000 on (``14084.5``, never ``1.408e+04``), trailing zeros dropped."""
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if value.is_integer():
        return str(int(value))
    if abs(value) >= 1000:
        text = f"{value:.1f}"
    else:
        text = f"{value:.4g}"
        if "e" in text:  # below 1e-4: enough decimals for 4 significant digits
            text = f"{value:.{3 - math.floor(math.log10(abs(value)))}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def grouped(count: float) -> str:
    """A count with thousands separators: ``361,770``; one that is not whole (a mean, a noisy count) from 1000 on
    with one decimal (``12,345.6``), below by `plain_number`."""
    count = float(count)
    if not math.isfinite(count):
        return str(count)
    if count.is_integer():
        return f"{int(count):,}"
    return f"{count:,.1f}" if abs(count) >= 1000 else plain_number(count)


def integer_span(interval: Interval) -> tuple[int | None, int | None]:
    """The smallest and largest whole numbers ``interval`` admits (None where it is unbounded on that side)."""
    low = None
    if not math.isinf(interval.low):
        low = math.ceil(interval.low) if interval.low_closed else math.floor(interval.low) + 1
    high = None
    if not math.isinf(interval.high):
        high = math.floor(interval.high) if interval.high_closed else math.ceil(interval.high) - 1
    return low, high


def numeric_condition(interval: Interval, attribute: NumericAttribute, *, symbols: bool = False) -> str:
    """The condition without the attribute's name: ``<= 30``, ``> 30``, ``in [31, 40]``, ``= 31`` or ``in (0.5, 2]``.

    An integer attribute's condition is written with the whole numbers it admits (``<= 30.47`` as
    ``<= 30``, ``> 30.47`` as ``> 30``), which admit exactly the same values; an interval that admits
    none is written as it is. ``symbols`` writes ``≤``, ``≥`` and ``∈`` for ``<=``, ``>=`` and ``in``.
    """
    le, ge, member = ("≤", "≥", "∈") if symbols else ("<=", ">=", "in")
    if attribute.integer:
        low, high = integer_span(interval)
        if low is None and high is not None:
            return f"{le} {high}"
        if high is None and low is not None:
            return f"> {low - 1}"
        if low is not None and high is not None and low <= high:
            return f"= {low}" if low == high else f"{member} [{low}, {high}]"
    if math.isinf(interval.low) and not math.isinf(interval.high):
        return f"{le if interval.high_closed else '<'} {plain_number(interval.high)}"
    if math.isinf(interval.high) and not math.isinf(interval.low):
        return f"{ge if interval.low_closed else '>'} {plain_number(interval.low)}"
    left, right = "[" if interval.low_closed else "(", "]" if interval.high_closed else ")"
    return f"{member} {left}{plain_number(interval.low)}, {plain_number(interval.high)}{right}"

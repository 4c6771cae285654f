"""Wording helpers for what prism prints (no dependencies, importable from any layer)."""

from __future__ import annotations

from collections.abc import Iterable


def counted(count: int, noun: str) -> str:
    """``"1 episode"``, ``"5 episodes"``: a count with its noun in the right number (nouns taking an ``s``)."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def did_you_mean(value: object, known: Iterable[str], cutoff: float = 0.6) -> str:
    """``"; did you mean 'resymnet'?"`` for the name in ``known`` nearest to ``value`` (difflib's ratio at
    least ``cutoff``), or ``""`` when none is close or ``value`` is not a string. The one suggester of every
    one-line config error that names a bad choice (``env.id``, ``reward.name``, ``reward.loss``, …)."""
    import difflib

    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, sorted(known), n=1, cutoff=cutoff)
    return f"; did you mean {close[0]!r}?" if close else ""


def significant(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits: ``0.00442``, ``1.53``, ``21.3``, ``4.4e-05`` (a fixed count
    of decimals prints a small ratio as ``0.00``); whole numbers from ``10**digits`` up, ``1234``."""
    import math

    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if abs(value) >= 10**digits:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"

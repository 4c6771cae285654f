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

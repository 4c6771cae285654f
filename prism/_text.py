"""Wording helpers for what prism prints (no dependencies, importable from any layer)."""

from __future__ import annotations


def counted(count: int, noun: str) -> str:
    """``"1 episode"``, ``"5 episodes"``: a count with its noun in the right number (nouns taking an ``s``)."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"

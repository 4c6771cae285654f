"""Field checks shared by the config dataclasses: each dataclass validates its own fields in
``__post_init__`` with these, so a bad value is refused once, where the field is defined, whether the
dataclass comes from a YAML file (``prism.config.load_config``) or is built in Python.

A failed check raises ``ValueError`` with one line that starts with the field's full config key
(``agent.gamma: must lie in (0, 1], got 0.0``); the config loader turns it into a
:class:`prism.config.ConfigError`.
"""

from __future__ import annotations

from typing import Any


def require(key: str, ok: bool, expected: str, value: Any) -> None:
    """Raise ``ValueError("<key>: must <expected>, got <value>")`` unless ``ok``."""
    if not ok:
        raise ValueError(f"{key}: must {expected}, got {value!r}")


def one_of(key: str, value: Any, choices: tuple[str, ...]) -> None:
    """``value`` is one of ``choices``; else the line lists them and names the nearest
    (``reward.loss: must be one of sum, randomized, got 'randomised'; did you mean 'randomized'?``)."""
    if value not in choices:
        from prism.core._text import did_you_mean

        raise ValueError(
            f"{key}: must be one of {', '.join(choices)}, got {value!r}{did_you_mean(value, choices)}"
        )


def positive(key: str, value: int | float) -> None:
    require(key, value > 0, "be positive", value)


def non_negative(key: str, value: int | float) -> None:
    require(key, value >= 0, "be >= 0", value)


def in_unit_interval(key: str, value: float) -> None:
    """``0 <= value <= 1`` (a probability)."""
    require(key, 0.0 <= value <= 1.0, "lie in [0, 1]", value)


def in_open_unit_interval(key: str, value: float) -> None:
    """``0 < value < 1`` (a fraction that leaves something on both sides)."""
    require(key, 0.0 < value < 1.0, "lie in (0, 1)", value)


def sizes(key: str, value: list[int]) -> None:
    """A non-empty list of positive layer sizes."""
    require(key, len(value) > 0 and all(h > 0 for h in value), "be a non-empty list of positive sizes", value)

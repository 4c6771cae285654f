"""The library chatter prism silences, in one place (the CLI, a run and each reward fit use it).

Lightning's per-fit info lines (GPU available, …) and a few warnings that are benign for prism's data loaders
(one process, iterable datasets, one-batch epochs) would otherwise flood a run's output; deprecation notices
from dependencies are not the user's problem and would break the CLI's one-line errors.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric", "lightning")
"""Loggers whose info lines are dropped (set to WARNING)."""

BENIGN_WARNINGS = (
    r".*does not have many workers.*",
    r".*log_every_n_steps.*",
    r".*isinstance\(treespec, LeafSpec\).*",
    r".*Total length of .* across ranks is zero.*",
    r".*IterableDataset.*__len__.*",
    r".*Trying to infer the `batch_size`.*",
)
"""Message patterns of warnings that say nothing about a prism run."""


def _apply(deprecations: bool) -> None:
    for name in LIGHTNING_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    if deprecations:
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
    for pattern in BENIGN_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)


def silence_library_noise(*, deprecations: bool = False) -> None:
    """For the rest of the process: Lightning's loggers at WARNING, the :data:`BENIGN_WARNINGS` ignored, and
    with ``deprecations`` every ``DeprecationWarning`` / ``FutureWarning`` too (the CLI's choice)."""
    _apply(deprecations)


@contextlib.contextmanager
def quiet_lightning() -> Iterator[None]:
    """:func:`silence_library_noise` for one block (e.g. a reward fit called from user code); the warning
    filters and the loggers' levels are restored afterwards."""
    loggers = [logging.getLogger(name) for name in LIGHTNING_LOGGERS]
    levels = [lg.level for lg in loggers]
    try:
        with warnings.catch_warnings():
            _apply(deprecations=False)
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)

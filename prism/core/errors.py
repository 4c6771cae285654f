"""Errors that stop a run on purpose (as opposed to bugs): raised deep inside the stack, caught by the CLI.

:class:`ConfigError` (bad input) and :class:`NonFiniteError` live here, at the bottom of the layers, so any
module can raise them without importing the config or each other.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path


class ConfigError(ValueError):
    """A bad config value; ``str(err)`` is one line that starts with the offending key (the CLI prints it and
    exits 2). Importable from :mod:`prism.config` too."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``prism fit``, carrying the run folder so the CLI can say how to go on.

    ``resumable``: the folder holds the run's ``config.yaml`` (``prism fit --resume RUN_DIR`` continues it from
    its last checkpoint, or from the start when none was saved); otherwise nothing of the run was written and
    ``removed`` says whether the folder this run had created was removed again (so that neither a rerun of the
    same command nor anything else meets an empty folder that ``--resume`` would refuse), and ``restored``
    whether the contents an ``--overwrite`` was replacing are back in it."""

    def __init__(self, run_dir: Path, *, resumable: bool, removed: bool = False, restored: bool = False):
        super().__init__(str(run_dir))
        self.run_dir = Path(run_dir)
        self.resumable = resumable
        self.removed = removed
        self.restored = restored


class Terminated(KeyboardInterrupt):
    """SIGTERM stopped a fit (``kill PID``, a scheduler ending a job): handled as a Ctrl-C (the run keeps its
    last checkpoint and ``--resume`` continues it), but ``prism fit`` exits 143 (128 + SIGTERM), not 130.

    Lightning answers a SIGTERM by raising a ``SystemExit`` without a code at its next loop step, which would
    end the process with exit code 0, as if the run had succeeded."""


def terminated(err: BaseException) -> bool:
    """Whether a SIGTERM (:class:`Terminated`) lies on ``err``'s chain (``__cause__`` / ``__context__``): a
    ``RunInterrupted`` raised ``from None`` while handling one still carries it as its context."""
    return _on_chain(err, Terminated)


def _on_chain(err: BaseException, kind: type[BaseException]) -> bool:
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def caused_by_interrupt(err: BaseException) -> bool:
    """Whether ``err`` comes from a Ctrl-C: a :class:`KeyboardInterrupt`, or an exception raised because of one.

    A Ctrl-C while a C extension initialises (``import mujoco``, at a run's first MuJoCo env) does not arrive as
    a KeyboardInterrupt: mujoco raises ``ImportError: initialization failed`` from it, and gymnasium turns that
    into ``DependencyNotInstalled: MuJoCo is not installed``. The interrupt is still on the exception's chain
    (``__cause__`` / ``__context__``)."""
    return _on_chain(err, KeyboardInterrupt)


class NonFiniteError(RuntimeError):
    """A training quantity (a loss term, a shaped reward, a parameter) became NaN or ±inf.

    The run stops at once, so the last checkpoint on disk (saved while everything was finite) stays the
    one to resume or evaluate from. ``env_step`` is the agent's env-step clock when the value was seen
    (the raiser may leave it ``None`` for a caller that knows the clock to fill in); ``checkpoint`` is the
    last good checkpoint, filled in by the run's checkpointer as the exception leaves ``trainer.fit``.
    """

    def __init__(self, quantity: str, value: float, env_step: int | None = None):
        self.quantity = quantity
        self.value = float(value)
        self.env_step = env_step
        self.checkpoint: Path | None = None
        super().__init__(quantity, self.value, env_step)

    @property
    def kind(self) -> str:
        """``nan``, ``inf`` or ``-inf``."""
        if math.isnan(self.value):
            return "nan"
        return "inf" if self.value > 0 else "-inf"

    def __str__(self) -> str:
        step = "?" if self.env_step is None else str(self.env_step)
        checkpoint = "none" if self.checkpoint is None else str(self.checkpoint)
        return f"{self.quantity} is {self.kind} at env step {step}; last good checkpoint: {checkpoint}"


def first_non_finite(named_values: Iterable[tuple[str, float]]) -> tuple[str, float] | None:
    """The first ``(name, value)`` whose value is NaN or ±inf, or ``None`` when all are finite."""
    for name, value in named_values:
        if not math.isfinite(value):
            return name, value
    return None

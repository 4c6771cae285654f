"""Critic divergence, detected as it happens, so a diverged run is never reported as a result without a word:
:class:`DivergenceWatch`.

Off-policy actor-critics on MuJoCo sometimes diverge: the TD loss leaves its usual scale and grows by orders of
magnitude while Q-values and the entropy term run away (two of our 25 halfcheetah-paper runs: critic loss
0.9 → 146 → 1.6 × 10⁴ within 15 000 steps). A run that diverges still finishes and writes a result, so a user
(or a report) must be told. The watch compares each log window's mean critic loss (``train/critic``, averaged
over the ``agent.log_every`` steps of the window) with the median of the windows before it; the first window
more than ``factor`` times that running median flags the member: one warning on the terminal, a
``train/critic_diverged`` scalar of 1 in TensorBoard at that step, and the step in ``summary.json``
(``critic_divergence_step``).

Why a running median of window means: the critic loss of a healthy run drifts as returns (and so Q-targets) grow
and is noisy from window to window, but it does not jump two orders of magnitude within a few thousand steps;
the median over the last ``history`` windows follows the drift and ignores single spikes in the history. The
first ``min_history`` windows after learning starts set the scale and are never flagged.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import deque
from typing import Any

DIVERGENCE_FACTOR = 100.0
"""A window's mean critic loss over this many times the running median of the windows before it diverges."""
HISTORY_WINDOWS = 20
"""Windows in the running median (20 000 env steps at ``agent.log_every = 1000``)."""
MIN_HISTORY = 5
"""Windows seen before any is judged."""


class DivergenceWatch:
    """Flags, once per member, the first log window whose mean critic loss exceeds ``factor`` × the running
    median of the previous ``history`` windows (module docstring)."""

    def __init__(
        self,
        members: int,
        factor: float = DIVERGENCE_FACTOR,
        history: int = HISTORY_WINDOWS,
        min_history: int = MIN_HISTORY,
    ) -> None:
        self.factor, self.history, self.min_history = float(factor), int(history), int(min_history)
        self.windows: list[deque[float]] = [deque(maxlen=self.history) for _ in range(members)]
        self.diverged_at: list[int | None] = [None] * members
        """Per member, the env step of the window that first diverged (None: never)."""

    def observe(self, member: int, critic_loss: float, env_step: int) -> bool:
        """Take member ``member``'s window mean at ``env_step``; True when this window first flags it."""
        past = self.windows[member]
        flagged = False
        if self.diverged_at[member] is None and len(past) >= self.min_history and math.isfinite(critic_loss):
            median = statistics.median(past)
            if median > 0 and critic_loss > self.factor * median:
                self.diverged_at[member] = int(env_step)
                flagged = True
        past.append(float(critic_loss))
        return flagged

    def warning(self, member: int, seed: int, critic_loss: float) -> str:
        """The one-line terminal warning of member ``member`` (seed ``seed``) flagged at this window."""
        median = statistics.median(list(self.windows[member])[:-1])
        return (
            f"prism fit: warning: seed {seed}: the critic is diverging at {self.diverged_at[member]} env steps "
            f"(train/critic {critic_loss:.4g}, over {self.factor:.0f}× its running median {median:.4g}); the "
            "run goes on, and summary.json records the step as critic_divergence_step (docs/method.md §6)"
        )

    def state_dict(self) -> dict[str, Any]:
        return {"windows": [list(w) for w in self.windows], "diverged_at": list(self.diverged_at)}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore :meth:`state_dict` (None: a checkpoint from before the watch, which starts afresh)."""
        if state is None:
            return
        for window, values in zip(self.windows, state["windows"], strict=True):
            window.clear()
            window.extend(float(v) for v in values)
        self.diverged_at = [None if s is None else int(s) for s in state["diverged_at"]]


def warn(message: str) -> None:
    """Print the warning on stderr, where the run's progress lines go."""
    print(message, file=sys.stderr, flush=True)


__all__ = ["DIVERGENCE_FACTOR", "DivergenceWatch", "warn"]

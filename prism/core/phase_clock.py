"""Where a run's time goes (:class:`PhaseClock`): CPU and wall seconds per phase, what ``summary.json`` reports
as ``phase_times`` and ``tools/bench_seed_cost.py`` prints side by side.

The loop times its collections and fits, the evaluation callbacks their evaluations; whatever the run spent
outside them (RL steps with their reward shaping and updates, checkpoints, set-up) is the remainder,
``rl_and_other`` (:func:`phase_breakdown`). A reward fit also splits its own time into training epochs and
validation passes (``reward_fits[i]``: ``train_cpu_s``, ``validation_cpu_s``).

CPU time is the process's user + system time (its threads included, evaluation worker processes not), as the
run's own ``cpu_time_s``; a pause or a shared core does not inflate it. Phases never nest. A checkpoint carries
each phase's seconds so far, an open phase's included (a fit snapshot is taken inside the fit phase), so a
resumed run counts, like its ``cpu_time_s``, the work its result is made of. A population's phases run in
lock-step for all members: each member's ``summary.json`` reports the population's phase times.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import Any

PHASES = ("collect_random", "collect_expert", "fit", "eval_periodic", "eval_final")
"""The timed phases, in the order a PRISM run meets them."""

REMAINDER = "rl_and_other"
"""The name of the run's time outside every timed phase (RL, shaping, updates, checkpoints, set-up)."""


class PhaseClock:
    """CPU and wall seconds spent in each of :data:`PHASES` (see the module docstring)."""

    def __init__(self) -> None:
        self.cpu_s: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.wall_s: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self._open: tuple[str, float, float] | None = None  # (phase, cpu at entry, wall at entry)

    @contextlib.contextmanager
    def measure(self, phase: str) -> Iterator[None]:
        """Count the block's CPU and wall time towards ``phase`` (one of :data:`PHASES`; no nesting)."""
        if phase not in PHASES:
            raise ValueError(f"PhaseClock: unknown phase {phase!r}; one of {', '.join(PHASES)}")
        if self._open is not None:
            raise RuntimeError(f"PhaseClock: {phase!r} started inside {self._open[0]!r} (phases do not nest)")
        self._open = (phase, time.process_time(), time.perf_counter())
        try:
            yield
        finally:
            self._close()

    def _close(self) -> None:
        assert self._open is not None
        phase, cpu0, wall0 = self._open
        self.cpu_s[phase] += time.process_time() - cpu0
        self.wall_s[phase] += time.perf_counter() - wall0
        self._open = None

    def state_dict(self) -> dict[str, dict[str, float]]:
        """Each phase's seconds so far, an open phase's up to now (what a checkpoint carries)."""
        cpu, wall = dict(self.cpu_s), dict(self.wall_s)
        if self._open is not None:
            phase, cpu0, wall0 = self._open
            cpu[phase] += time.process_time() - cpu0
            wall[phase] += time.perf_counter() - wall0
        return {"cpu_s": cpu, "wall_s": wall}

    def load_state_dict(self, state: Mapping[str, Mapping[str, float]] | None) -> None:
        """Start from a checkpoint's seconds (``None``, a checkpoint from before phase times: from zero). Any
        open phase restarts its count now: the resumed process redoes the phase from the checkpoint's point."""
        self.cpu_s = dict.fromkeys(PHASES, 0.0)
        self.wall_s = dict.fromkeys(PHASES, 0.0)
        if state is not None:
            for phase in PHASES:
                self.cpu_s[phase] = float(state["cpu_s"].get(phase, 0.0))
                self.wall_s[phase] = float(state["wall_s"].get(phase, 0.0))
        if self._open is not None:
            self._open = (self._open[0], time.process_time(), time.perf_counter())


def phase_breakdown(
    phases: Mapping[str, Mapping[str, float]], cpu_total_s: float | None, wall_total_s: float | None
) -> dict[str, dict[str, float | None]]:
    """``summary.json``'s ``phase_times``: each phase's ``cpu_s`` and ``wall_s`` (a :meth:`PhaseClock.state_dict`),
    then :data:`REMAINDER`, the run's totals less every phase (None where a total is unknown)."""
    out: dict[str, dict[str, float | None]] = {
        phase: {"cpu_s": float(phases["cpu_s"][phase]), "wall_s": float(phases["wall_s"][phase])}
        for phase in PHASES
    }

    def rest(total: float | None, kind: str) -> float | None:
        return None if total is None else total - sum(float(phases[kind][p]) for p in PHASES)

    out[REMAINDER] = {"cpu_s": rest(cpu_total_s, "cpu_s"), "wall_s": rest(wall_total_s, "wall_s")}
    return out


def fit_split(record: Mapping[str, Any]) -> tuple[float, float, float] | None:
    """A ``reward_fits`` record's CPU seconds as ``(training epochs, validation passes, the rest of the fit:
    set-up, the split and scaler, the final scoring)``, or None for a record without them (a plug-in's plain
    fit, a run from before phase times)."""
    cpu, train, val = record.get("cpu_time_s"), record.get("train_cpu_s"), record.get("validation_cpu_s")
    if cpu is None or train is None or val is None:
        return None
    return float(train), float(val), float(cpu) - float(train) - float(val)


__all__ = ["PHASES", "REMAINDER", "PhaseClock", "fit_split", "phase_breakdown"]

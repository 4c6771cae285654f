"""A run's time across its processes (:class:`RunClock`): what ``summary.json`` reports as ``wall_time_s`` and
``cpu_time_s``.

A run killed and resumed, or finished and continued to more cycles, is trained by several processes. Each
checkpoint carries the run's time so far (the time its earlier processes spent on the work that checkpoint
holds, plus this process's until the save), and a resumed process starts counting from there. So a run's
total counts the work its result is made of: what a killed process did after its last checkpoint is redone,
and counted once, by the process that redoes it.

Wall time counts everything between the start of training and its end, pauses included (a stopped process, a
busy machine); CPU time is the main process's user + system time (its threads included, evaluation worker
processes not), which a pause or a shared core does not inflate. A checkpoint written before prism carried
times leaves the totals unknown (``None``): a total that left out the earlier processes would pass for the
whole.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class RunTimes:
    """Seconds spent training: by this process, and by the run as a whole (``None`` when unknown)."""

    wall_s_this_process: float
    wall_s: float | None
    cpu_s: float | None


class RunClock:
    """Counts a run's training time in this process and adds what its checkpoint carried (module docstring)."""

    def __init__(self) -> None:
        self._carried_wall: float | None = 0.0
        self._carried_cpu: float | None = 0.0
        self.start()

    def start(self) -> None:
        """Start this process's count (when training starts)."""
        self._wall0 = time.perf_counter()
        self._cpu0 = time.process_time()

    def carry(self, state: dict[str, float] | None) -> None:
        """Add the time a checkpoint carried (:meth:`state_dict`); ``None`` (a checkpoint without times) makes
        the totals unknown."""
        if state is None:
            self._carried_wall = self._carried_cpu = None
        else:
            self._carried_wall, self._carried_cpu = float(state["wall_time_s"]), float(state["cpu_time_s"])

    def read(self) -> RunTimes:
        """This process's wall seconds so far, and the run's totals (one reading of each clock)."""
        wall = time.perf_counter() - self._wall0
        cpu = time.process_time() - self._cpu0
        return RunTimes(
            wall_s_this_process=wall,
            wall_s=None if self._carried_wall is None else self._carried_wall + wall,
            cpu_s=None if self._carried_cpu is None else self._carried_cpu + cpu,
        )

    def state_dict(self) -> dict[str, float] | None:
        """What a checkpoint carries: the run's totals now (``None`` while they are unknown)."""
        times = self.read()
        if times.wall_s is None or times.cpu_s is None:
            return None
        return {"wall_time_s": times.wall_s, "cpu_time_s": times.cpu_s}

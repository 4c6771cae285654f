"""Plain progress lines for a run whose stderr is not a terminal (``prism fit --progress lines``, and
``auto`` when stderr is a file or a pipe): what the bars of :mod:`prism.display.progress` show, as lines a log
file keeps.

Every line starts with the wall time since the run started, ``[h:mm:ss]``:

- a phase with a bar of its own (collection, reward fit, evaluation) writes ``<desc>: start (<n> <unit>)``
  when it starts and the bar's summary line when it ends;
- a reward fit also writes, at the first epoch end after every ``fit_every_s`` seconds (60), ``<desc>: epoch
  e/E, val_sum_mse …, val_corr …, <t> s/epoch`` (the bar's numbers), so a fit of hours shows in the log that it
  moves;
- RL writes ``RL (cycle c/C): start at env step s/S`` when a cycle's RL phase starts, ``RL (cycle c/C): end
  at env step s/S, <n> env steps in <t>s`` when it ends, and every ``every`` env steps (1000) or ``every_s``
  seconds (30), whichever comes first, the RL bar's numbers: ``RL: s/S env steps (p%), <rate> steps/s,
  phase=… cycle=c/C`` (the rate is the current RL phase's, its periodic evaluations included; the seconds
  bound keeps a slow backbone, GPI-PD's 20 updates per env step, from staying silent for minutes).

Each line is flushed at once, so a log shows where a run is while it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import IO, Any

from prism.display.progress import Progress

_UNITS = {"ep": "episodes", "epoch": "epochs at most", "step": "env steps"}
_OWN_LINES = ("eval", "final_eval")
"""Phases that an evaluation sets while it runs; they write their own start and end lines."""


class _CountingBar:
    """What a phase's tqdm bar is to the code that drives it (``update``, ``set_postfix``, ``n``, ``close``),
    printing nothing: :class:`LineProgress` writes the phase's start and end lines."""

    disable = False

    def __init__(self, total: int | None):
        self.total = total
        self.n = 0
        self.postfix = ""

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        self.postfix = text

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass


class _RLLines(_CountingBar):
    """The RL bar as lines: one each time its count crosses a multiple of ``every`` env steps, or when
    ``every_s`` seconds passed since the last line (or the bar's start) and the count moved."""

    def __init__(self, progress: LineProgress, total: int, every: int, every_s: float):
        super().__init__(total)
        self.progress = progress
        self.every = max(1, int(every))
        self.every_s = float(every_s)
        self._printed = -1
        self._start_time = self._last_time = progress.timer()
        self._start_step: int | None = None

    def due(self) -> bool:
        """Whether ``every_s`` seconds passed since the last line (the caller then refreshes the count)."""
        return self.progress.timer() - self._last_time >= self.every_s

    def restart_rate(self, step: int | None) -> None:
        """Measure the steps/s of the lines from here (an RL phase starts at env step ``step``; ``None``: the
        count at the next refresh): a cycle's rate is its own, not diluted by the reward fit before it."""
        self._start_step, self._start_time = step, self.progress.timer()

    def refresh(self) -> None:
        if self._start_step is None:
            self._start_step = self.n
        crossed = self.n // self.every > max(self._printed, 0) // self.every
        moved = self.n > max(self._printed, self._start_step)
        if self.n > self._printed and (crossed or (moved and self.due())):
            now = self.progress.timer()
            took = now - self._start_time
            rate = (self.n - self._start_step) / took if took > 0 else float("nan")
            percent = 100.0 * self.n / self.total if self.total else 100.0
            self.progress.line(
                f"RL: {self.n}/{self.total} env steps ({percent:.0f}%), {rate:.0f} steps/s, {self.postfix}"
            )
            self._printed, self._last_time = self.n, now


class _FitLines(_CountingBar):
    """A reward fit's epoch bar as lines: one at the first epoch end after each ``every_s`` seconds."""

    def __init__(self, progress: LineProgress, desc: str, total: int | None, every_s: float):
        super().__init__(total)
        self.progress, self.desc, self.every_s = progress, desc, float(every_s)
        self._started = time.perf_counter()
        self._since: tuple[int, float] | None = None  # (epochs, time) at the last line

    def set_postfix(
        self, ordered_dict: dict[str, Any] | None = None, refresh: bool = True, **kwargs: Any
    ) -> None:
        values = {**(ordered_dict or {}), **kwargs}
        self.postfix = ", ".join(f"{k} {v}" for k, v in values.items())

    def update(self, n: int = 1) -> None:
        now = time.perf_counter()
        if self._since is None:  # the first epoch end (a resumed fit's count starts at its epoch, not 0)
            self._since = (self.n, self._started)
        self.n += n
        epochs, since = self._since
        if now - since >= self.every_s and self.n > epochs:
            total = self.total if self.total is not None else "?"
            postfix = f", {self.postfix}" if self.postfix else ""
            per_epoch = (now - since) / (self.n - epochs)
            self.progress.line(f"{self.desc}: epoch {self.n}/{total}{postfix}, {per_epoch:.1f} s/epoch")
            self._since = (self.n, now)


class LineProgress(Progress):
    """:class:`~prism.display.progress.Progress` as plain lines (see the module docstring)."""

    def __init__(
        self,
        file: IO[str] | None = None,
        *,
        every: int = 1000,
        every_s: float = 30.0,
        fit_every_s: float = 60.0,
        timer: Callable[[], float] = time.perf_counter,
    ):
        super().__init__(file, disable=False)
        self.timer = timer
        """Wall-clock seconds (the stamps and the RL lines' time bound; tests pass their own)."""
        self.every = every
        self.every_s = every_s
        self.fit_every_s = fit_every_s
        self._start = timer()
        self._loop_phase = "init"
        self._rl_since: tuple[int, float] | None = None

    @property
    def active(self) -> bool:
        return True

    def line(self, text: str) -> None:
        """Write one line, prefixed with the wall time since the run started, and flush it."""
        seconds = int(self.timer() - self._start)
        stamp = f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        print(f"[{stamp}] {text}", file=self.file, flush=True)

    def bar(self, desc: str, total: int | None, unit: str) -> _CountingBar:
        self.show_phase()
        count = f" ({total} {_UNITS.get(unit, unit)})" if total is not None else ""
        self.line(f"{desc}: start{count}")
        if unit == "epoch":
            return _FitLines(self, desc, total, self.fit_every_s)
        return _CountingBar(total)

    def close(self, bar: Any, summary: str) -> None:
        bar.close()
        self.line(summary)

    def note(self, text: str) -> None:
        self.line(text)

    def rl_bar(self, total: int) -> _RLLines:
        return _RLLines(self, total, self.every, self.every_s)

    def due(self) -> bool:
        return isinstance(self.main, _RLLines) and self.main.due()

    def _steps(self) -> str:
        steps = self.clock() if self.clock is not None else (self.main.n if self.main is not None else 0)
        total = self.total_steps if self.total_steps is not None else "?"
        return f"{steps}/{total}"

    def set_phase(self, phase: str, cycle: int, cycles: int, steps: int | None = None) -> None:
        if phase not in _OWN_LINES:
            rl_ends = self._loop_phase == "rl" and (phase != "rl" or cycle != self.cycle)
            clock_step = self.clock() if self.clock is not None else None
            if rl_ends and self._rl_since is not None:
                start, since = self._rl_since
                self.line(
                    f"RL (cycle {self.cycle + 1}/{self.cycles}): end at env step {self._steps()}, "
                    f"{(clock_step or 0) - start} env steps in {self.timer() - since:.1f}s"
                )
                self._rl_since = None
            if phase == "rl" and self._rl_since is None:
                self.line(f"RL (cycle {cycle + 1}/{cycles}): start at env step {self._steps()}")
                self._rl_since = (clock_step or 0, self.timer())
                if isinstance(self.main, _RLLines):
                    self.main.restart_rate(clock_step)
            self._loop_phase = phase
        super().set_phase(phase, cycle, cycles, steps=steps)


PROGRESS_MODES = ("auto", "bar", "lines", "none")
"""``prism fit --progress``: bars in a terminal and lines elsewhere (``auto``), always bars, always lines,
nothing."""


def make_progress(
    mode: str = "auto",
    file: IO[str] | None = None,
    *,
    every: int = 1000,
    every_s: float = 30.0,
    fit_every_s: float = 60.0,
) -> Progress:
    """The run's display for ``--progress mode`` (see :data:`PROGRESS_MODES`); ``every`` / ``every_s``: RL env
    steps / seconds after which the next RL progress line is written (whichever comes first);
    ``fit_every_s``: seconds between two of a reward fit's epoch lines."""
    if mode not in PROGRESS_MODES:
        raise ValueError(f"--progress: expected one of {', '.join(PROGRESS_MODES)}, got {mode!r}")
    if mode == "auto":
        mode = "bar" if Progress(file).active else "lines"
    if mode == "lines":
        return LineProgress(file, every=every, every_s=every_s, fit_every_s=fit_every_s)
    return Progress(file, disable=mode == "none")

"""What a run shows in the terminal: every phase with its own progress, on stderr.

- **RL** (:class:`PhaseProgressBar`): one bar over env steps, the RL clock, refreshed each time the clock
  crosses a multiple of ``refresh_every`` (250) env steps (a Lightning batch runs ``agent.steps_per_batch``
  env steps, so the check is "crossed", not "is a multiple"), and at every phase change; its postfix names the
  loop's current phase (``collect_random``, ``fit``, ``rl``, ``collect_expert``, ``eval``, ``final_eval``,
  ``done``) and cycle.
- **Collection** (random and expert): a bar over episodes, per member.
- **Reward fit**: a bar over epochs (``reward.max_epochs``; early stopping may end it sooner) with the
  ensemble's mean validation loss and the validation correlation, per member.
- **Evaluation**: a bar over episodes (weights × episodes), the final one and the periodic ones.

Phase bars vanish when their phase ends and leave one summary line (``tqdm.write``) above the RL bar.

When stderr is not a terminal (a log file under a grid or a cluster, a pipe) bars would be noise, so
``prism fit --progress auto`` (the default) writes plain lines instead (:class:`LineProgress`, from
prism.display.progress_lines): one when each phase starts, its summary line when it ends, and one every
``every`` RL env steps (or ``every_s`` seconds, whichever comes first) with the RL bar's numbers. ``--progress bar`` forces the bars, ``lines`` the lines,
``none`` shows nothing (``prism.display.progress_lines.make_progress``). Nothing here draws random numbers or changes what a run
computes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import IO, Any

from lightning.pytorch.callbacks import Callback
from tqdm.auto import tqdm


class Progress:
    """The run's terminal display: creates the phase bars and knows the RL bar, whose postfix shows the phase.

    ``file`` defaults to stderr; ``disable=None`` turns everything off when ``file`` is not a terminal."""

    def __init__(self, file: IO[str] | None = None, disable: bool | None = None):
        self.file = file if file is not None else sys.stderr
        self.disable = disable
        self.main: tqdm | None = None
        """The RL bar (None before RL starts and after it ends)."""
        self.phase = "init"
        self.cycle = 0
        self.cycles = 1
        self.clock: Any | None = None
        """``clock() -> env steps``: the agent's RL clock (set by the run builder; the line display reads it)."""
        self.total_steps: int | None = None
        """The run's RL budget in env steps (set by the run builder)."""
        self.steps: int | None = None
        """The env steps when the phase was last set (the RL bar shows them; ``None``: not known yet)."""

    @property
    def active(self) -> bool:
        """Whether anything is shown (``disable=None``: only when ``file`` is a terminal)."""
        if self.disable is not None:
            return not self.disable
        isatty = getattr(self.file, "isatty", None)
        return bool(isatty and isatty())

    def bar(self, desc: str, total: int | None, unit: str) -> tqdm:
        """A phase bar (closed with :meth:`close`); the RL bar's postfix is refreshed to the current phase."""
        self.show_phase()
        return tqdm(
            total=total,
            desc=desc,
            unit=unit,
            leave=False,
            dynamic_ncols=True,
            file=self.file,
            disable=self.disable,
        )

    def close(self, bar: tqdm, summary: str) -> None:
        """End a phase bar, leaving ``summary`` as one line (when the display is on)."""
        shown = not bar.disable
        bar.close()
        if shown:
            tqdm.write(summary, file=self.file)

    def note(self, text: str) -> None:
        """One line above the bars (when the display is on)."""
        if self.active:
            tqdm.write(text, file=self.file)

    def set_phase(self, phase: str, cycle: int, cycles: int, steps: int | None = None) -> None:
        """Show ``phase`` (and, when given, the env-step count ``steps``) on the RL bar."""
        self.phase, self.cycle, self.cycles = phase, cycle, cycles
        if steps is not None:
            self.steps = steps
        self.show_phase()

    def due(self) -> bool:
        """Whether the display asks for a refresh now, whatever the step count (the line display's time
        bound, :mod:`prism.display.progress_lines`); the bars move on env steps only."""
        return False

    def postfix(self) -> str:
        return f"phase={self.phase} cycle={self.cycle + 1}/{self.cycles}"

    def show_phase(self) -> None:
        if self.main is not None:
            if self.steps is not None:
                # The bar otherwise moves only every refresh_every steps: a phase shown with the count of
                # up to 249 steps earlier reads as stale.
                self.main.n = self.steps
            self.main.set_postfix_str(self.postfix(), refresh=False)
            self.main.refresh()

    def rl_bar(self, total: int) -> Any:
        """The RL bar over ``total`` env steps (:class:`PhaseProgressBar` keeps it up to date)."""
        return tqdm(
            total=total,
            desc="prism fit (RL)",
            unit="step",
            dynamic_ncols=True,
            file=self.file,
            disable=self.disable,  # None: off when stderr is not a terminal (CI logs, pipes)
        )


class PhaseProgressBar(Callback):
    """The RL bar: tqdm over env steps (the RL clock), with the phase and cycle of ``loop`` (the run's
    :class:`~prism.loop.phases.PrismLoopCallback`) in the postfix.

    Refreshed whenever the clock crosses a multiple of ``refresh_every`` env steps, so the bar costs nothing
    on the hot path and moves at the promised pace whatever ``agent.steps_per_batch`` is.
    """

    def __init__(self, loop: Any, refresh_every: int = 250, progress: Progress | None = None):
        self.loop = loop
        self.refresh_every = refresh_every
        self.progress = progress if progress is not None else Progress()
        self._bar: tqdm | None = None
        self._phase: str | None = None
        self._shown_step = 0
        self.refreshes = 0
        """How many times the bar was refreshed (tests read it)."""

    def _sync(self, pl_module) -> None:
        if self._bar is None:
            return
        state = self.loop.state
        self._shown_step = self._bar.n = pl_module.env_step_count
        self._phase = state.phase
        self.refreshes += 1
        self.progress.set_phase(state.phase, state.cycle, self.loop.settings.cycles, pl_module.env_step_count)

    def on_train_start(self, trainer, pl_module) -> None:
        self._bar = self.progress.rl_bar(self.loop.total_env_steps)
        self.progress.main = self._bar
        self._sync(pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._bar is None:
            return
        every = self.refresh_every
        crossed = pl_module.env_step_count // every != self._shown_step // every
        # due(): the line display's time bound (a line at least every 30 s of a slow RL phase)
        if crossed or self.loop.state.phase != self._phase or self.progress.due():
            self._sync(pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        # Runs after the evaluation callbacks' on_train_end (the final evaluation, with a bar of its own).
        self._sync(pl_module)
        self._close()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._close()

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
            self.progress.main = None


VAL_LOSS_LABEL = "val_sum_mse"
"""The progress line's name for a fit's validation loss. Whatever the training loss (eq. 1, randomized, RRD's),
validation scores each network by eq. 1's error on whole validation segments: the mean squared error of its
predicted segment sums (the hidden reward's units squared), averaged over the ensemble. A plain ``val_loss``
read as the training loss, so two fits' numbers (RRD's 10× ReSymNet's on walker2d's first fit, table1-study)
looked like two losses' scales; they are one quantity, and its size is the fit's quality."""


class RewardFitProgress(Callback):
    """A reward fit's bar: one tick per epoch, the ensemble's mean validation loss (labelled
    :data:`VAL_LOSS_LABEL`) and correlation of the epoch just run.

    Its closing line scores the model the fit keeps (each network's best epoch), not the last epoch, so it
    agrees with ``summary.json`` and ``reward/val_correlation``: those scores exist only once the fit has
    returned, so the bar stays until whoever ran the fit hands them to :meth:`report`. A fit that fails or
    is interrupted closes its bar at once."""

    def __init__(self, progress: Progress, desc: str, max_epochs: int, log_prefix: str = "reward_fit"):
        self.progress = progress
        self.desc = desc
        self.max_epochs = max_epochs
        self.log_prefix = log_prefix
        self._bar: tqdm | None = None
        self._start = 0.0
        self._last: dict[str, float] = {}
        self._in_epoch = False  # between an epoch-start hook and its epoch-end hook
        self._took: float | None = None  # the fit's wall seconds, once it has ended normally

    def on_fit_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()
        self._bar = self.progress.bar(self.desc, total=self.max_epochs, unit="epoch")

    def _count_from(self, epochs: int) -> None:
        # A fit resumed from a snapshot goes on at its epoch: the count starts there, not at 0.
        if self._bar is not None and self._bar.n < epochs:
            self._bar.n = epochs
            self._bar.refresh()

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._count_from(trainer.current_epoch)
        self._in_epoch = True

    def on_train_epoch_end(self, trainer, pl_module) -> None:  # after the epoch's validation
        if self._bar is None:
            return
        if not self._in_epoch:
            # Lightning resumes a snapshot taken at an epoch's validation end by ending that epoch again (its
            # epoch-end hooks run with no epoch-start hook before them): it ran in the stopped process, so it
            # is counted, not shown nor timed as one of this process's epochs.
            self._count_from(trainer.current_epoch + 1)
            return
        self._in_epoch = False
        metrics = trainer.callback_metrics
        prefix = f"{self.log_prefix}/val_loss/m"
        losses = [float(v) for k, v in metrics.items() if k.startswith(prefix)]
        corr = metrics.get(f"{self.log_prefix}/val_corr")
        self._last = {VAL_LOSS_LABEL: sum(losses) / len(losses) if losses else float("nan")}
        if corr is not None:
            self._last["val_corr"] = float(corr)
        self._bar.set_postfix({k: f"{v:.4g}" for k, v in self._last.items()}, refresh=False)
        self._bar.update(1)

    def _finish(self, values: str, took: float, note: str = "") -> None:
        if self._bar is None:
            return
        epochs = int(self._bar.n)
        self.progress.close(self._bar, f"{self.desc}: {epochs} epochs  {values}  {took:.1f}s{note}")
        self._bar = None

    def _last_epoch_values(self) -> str:
        return "  ".join(f"{k} {v:.4g}" for k, v in self._last.items())

    def on_fit_end(self, trainer, pl_module) -> None:
        # The line waits for the kept model's scores (report), computed after the Trainer is done.
        self._took = time.perf_counter() - self._start

    def report(self, val_sum_mse: Sequence[float] | None, val_corr: Sequence[float] | None) -> None:
        """Close the bar of a fit that has ended with its line: the kept model's validation loss (the mean over
        the ensemble of each network's best, :data:`VAL_LOSS_LABEL`) and correlation, one value per model
        (a population's stacked fit keeps one per member, shown ``a/b/…``). ``None``: the fit reported no
        scores (a plug-in's), and the line shows the last epoch's, saying so."""
        if self._bar is None:
            return
        took = self._took if self._took is not None else time.perf_counter() - self._start
        if val_sum_mse is None or val_corr is None:
            values = f"{self._last_epoch_values()} (last epoch)" if self._last else ""
        else:
            kept = {VAL_LOSS_LABEL: val_sum_mse, "val_corr": val_corr}
            values = "  ".join(f"{k} {'/'.join(f'{v:.4g}' for v in vs)}" for k, vs in kept.items())
            values += " (kept model)"
        self._finish(values, took)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        # Not "(stopped)": that reads like early stopping, which ends a fit normally (on_fit_end).
        if isinstance(exception, (KeyboardInterrupt, SystemExit)):  # Ctrl-C (Lightning hands it on as is)
            note = "  (interrupted)"
        else:
            note = f"  (failed: {type(exception).__name__})"
        self._finish(self._last_epoch_values(), time.perf_counter() - self._start, note=note)

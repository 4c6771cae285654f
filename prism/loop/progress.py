"""A progress bar that shows what an RL researcher wants to see: phase, cycle and env steps."""

from __future__ import annotations

import sys

from lightning.pytorch.callbacks import Callback
from tqdm.auto import tqdm

from prism.loop.phases import PrismLoopCallback


class PhaseProgressBar(Callback):
    """tqdm over env steps (the RL clock), with the loop's phase and cycle in the postfix.

    Refreshed every ``refresh_every`` env steps so the bar costs nothing on the hot path.
    """

    def __init__(self, loop: PrismLoopCallback, refresh_every: int = 250):
        self.loop = loop
        self.refresh_every = refresh_every
        self._bar: tqdm | None = None
        self._phase: str | None = None

    def _sync(self, pl_module) -> None:
        if self._bar is None:
            return
        steps = pl_module.env_step_count
        self._bar.n = steps
        state = self.loop.state
        self._bar.set_postfix_str(
            f"phase={state.phase} cycle={state.cycle + 1}/{self.loop.settings.cycles}", refresh=False
        )
        self._bar.refresh()

    def on_train_start(self, trainer, pl_module) -> None:
        self._bar = tqdm(
            total=self.loop.total_env_steps,
            desc="prism fit",
            unit="step",
            dynamic_ncols=True,
            file=sys.stderr,
            disable=None,  # off when stderr is not a terminal (CI logs, pipes)
        )
        self._sync(pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._bar is not None and (
            pl_module.env_step_count % self.refresh_every == 0 or self.loop.state.phase != self._phase
        ):
            self._phase = self.loop.state.phase
            self._sync(pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        self._sync(pl_module)
        if self._bar is not None:
            self._bar.close()
            self._bar = None

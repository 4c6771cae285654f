"""Where a reward fit's time goes (:class:`FitTimer`): CPU seconds in training epochs and in validation passes,
what a fit's record lists as ``train_cpu_s`` and ``validation_cpu_s`` (docs/benchmarks.md, the seed-cost
breakdown; ``tools/bench_seed_cost.py``).

A Lightning callback, not a hook of the fit's module: callbacks run whatever hooks a module overrides (the stacked
fit's do), and Lightning keeps a callback's ``state_dict`` in the fit's snapshot, so a fit resumed from one
counts on from the snapshot's seconds.
"""

from __future__ import annotations

import io
import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback


class FitTimer(Callback):
    """Sums the process's CPU seconds spent in the fit's training epochs (from an epoch's start to its
    validation, or to its end when it has none) and in its validation passes."""

    def __init__(self) -> None:
        self.train_cpu_s = 0.0
        self.validation_cpu_s = 0.0
        self._train_since: float | None = None
        self._validation_since: float | None = None

    def _stop_training_count(self) -> None:
        if self._train_since is not None:
            self.train_cpu_s += time.process_time() - self._train_since
            self._train_since = None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._train_since = time.process_time()

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stop_training_count()
        self._validation_since = time.process_time()

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._validation_since is not None:
            self.validation_cpu_s += time.process_time() - self._validation_since
            self._validation_since = None

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stop_training_count()  # an epoch without a validation pass

    def state_dict(self) -> dict[str, Any]:
        return {"train_cpu_s": self.train_cpu_s, "validation_cpu_s": self.validation_cpu_s}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.train_cpu_s = float(state_dict["train_cpu_s"])
        self.validation_cpu_s = float(state_dict["validation_cpu_s"])


def snapshot_cpu_s(snapshot: bytes | None) -> float:
    """The fit's CPU seconds before ``snapshot`` was taken (0 without one, or from before fits carried them)."""
    if snapshot is None:
        return 0.0
    return float(torch.load(io.BytesIO(snapshot), weights_only=False).get("prism_fit_cpu_s", 0.0))


class FitClock:
    """A fit's CPU seconds (the process's, threads included): in all, since the fit began plus what a snapshot
    it resumed from carried, and in its training epochs and validation passes (its :class:`FitTimer`)."""

    def __init__(self, resume: bytes | None) -> None:
        self.carried_s = snapshot_cpu_s(resume)
        self.timer = FitTimer()
        self._start = time.process_time()

    def read(self) -> tuple[float, float, float]:
        """``(total, training, validation)`` CPU seconds so far."""
        total = self.carried_s + time.process_time() - self._start
        return total, self.timer.train_cpu_s, self.timer.validation_cpu_s


__all__ = ["FitClock", "FitTimer", "snapshot_cpu_s"]

"""The logging window of an :class:`~prism.agents.off_policy.OffPolicyAgent`: training terms accumulated on the
device between flushes, written per member against env steps every ``log_every`` steps, and the NaN/inf checks
that ride on the same accumulated sums (so finiteness costs no extra host sync per update)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from prism.agents.divergence import warn
from prism.core.errors import NonFiniteError, first_non_finite

CRITIC_KEY = "train/critic"
"""The logged training term the divergence watch reads (every built-in backbone logs its critic's TD loss so)."""


class LogWindowMixin:
    """Non-finite checks and per-window logging of :class:`~prism.agents.off_policy.OffPolicyAgent` (it owns
    every attribute used here: ``_train_sums``, ``_updates_in_window``, ``_window_start``, ``_finished``, …)."""

    _restored_log_window: tuple[torch.Tensor, int] | None = None
    """The log window a checkpoint held (its sums and updates), taken by :meth:`_start_log_window`."""

    def _start_log_window(self) -> None:
        """Open the run's first log window, or go on with the one a resumed checkpoint held: the window means
        (and so the divergence watch) then equal the uninterrupted run's when a checkpoint falls mid-window."""
        restored, self._restored_log_window = self._restored_log_window, None
        if restored is None:
            self._train_sums = torch.zeros(self.members, len(self.train_keys), device=self.device)
            self._updates_in_window = 0
        else:
            self._train_sums, self._updates_in_window = restored[0].to(self.device), restored[1]

    def update_step(self) -> torch.Tensor:
        """One update of every member on a fresh replay batch: ``update(sample_batch())``. A backbone may run
        the same over static buffers (CAPQL: :mod:`prism.agents.static_update`)."""
        return self.update(self.sample_batch())

    def _update_and_accumulate(self) -> None:
        """One update on a fresh replay batch; its training terms join the window's sums (no host sync)."""
        terms = self.update_step()
        self._train_sums.add_(terms)
        self._updates_in_window += 1
        self._n_updates += 1

    def _non_finite_train_term(self) -> tuple[str, float] | None:
        """The first NaN/inf training term (any member) accumulated since the last flush (one host sync)."""
        if self._train_sums is None or self._updates_in_window == 0:
            return None
        sums = self._train_sums.tolist()
        return first_non_finite((key, row[i]) for row in sums for i, key in enumerate(self.train_keys))

    def _root_cause(self, err: NonFiniteError) -> NonFiniteError:
        """A NaN action or shaped reward usually comes from a loss that went NaN earlier in the window:
        name that loss instead when there is one (only on this error path, so no sync per step)."""
        bad = self._non_finite_train_term()
        return err if bad is None else NonFiniteError(*bad, env_step=self._steps)

    def check_finite(self) -> None:
        """Raise :class:`~prism.core.errors.NonFiniteError` if a training term of the current log window or a
        parameter is NaN/inf (one host sync: the checkpointer calls it before every save)."""
        bad = self._non_finite_train_term()
        if bad is None:
            params = list(self.named_parameters())
            finite = torch.stack([torch.isfinite(p).all() for _, p in params]).tolist() if params else []
            for (name, p), ok in zip(params, finite):
                if not ok:
                    bad = f"param/{name}", float(p.detach()[~torch.isfinite(p.detach())][0])
                    break
        if bad is not None:
            raise NonFiniteError(*bad, env_step=self._steps)

    def divergence_steps(self) -> list[int | None]:
        """Per member, the env step its critic was flagged as diverging at (None: never)."""
        return list(self.divergence.diverged_at)

    def _watch_divergence(self, member: int, means: dict[str, float]) -> dict[str, float]:
        """Feed the window's mean critic loss to the watch; on the window that first flags the member, warn
        once and return the ``train/critic_diverged`` scalar."""
        if CRITIC_KEY not in means:
            return {}
        if not self.divergence.observe(member, means[CRITIC_KEY], self._steps):
            return {}
        warn(self.divergence.warning(member, self.seeds[member], means[CRITIC_KEY]))
        return {"train/critic_diverged": 1.0}

    # ---- logging --------------------------------------------------------------------------------------
    def _loggers(self) -> list[Any | None]:
        if self.member_loggers is not None:
            return list(self.member_loggers)
        return [self.logger] * self.members

    def _flush_logs(self) -> None:
        """Write the window's averages per member against env steps (one host sync per ``log_every``)."""
        if self._window_start is None:
            return
        start_time, start_steps = self._window_start
        now = time.perf_counter()
        elapsed = max(now - start_time, 1e-9)
        means = None
        if self._updates_in_window > 0 and self._train_sums is not None:
            means = (self._train_sums / self._updates_in_window).tolist()
            bad = first_non_finite((key, row[i]) for row in means for i, key in enumerate(self.train_keys))
            if bad is not None:  # stop here: the last checkpoint on disk predates the bad update
                raise NonFiniteError(*bad, env_step=self._steps)
            self._train_sums.zero_()
        for m, logger in enumerate(self._loggers()):
            metrics: dict[str, float] = {}
            if means is not None:
                metrics.update(zip(self.train_keys, means[m]))
                metrics.update(self._watch_divergence(m, metrics))
            if self._finished[m]:
                returns = np.mean([r for r, _ in self._finished[m]], axis=0)
                for name, value in zip(self.spec.objective_names, returns):
                    metrics[f"rollout/return_{name}"] = float(value)
                metrics["rollout/episode_length"] = float(np.mean([n for _, n in self._finished[m]]))
                metrics["rollout/episodes"] = float(len(self._finished[m]))
                self._finished[m].clear()
            if self._steps > start_steps:
                # Per member and in aggregate: S members each take one env step per clock tick.
                metrics["time/env_steps_per_s"] = (self._steps - start_steps) / elapsed
                metrics["time/population_env_steps_per_s"] = (
                    self.members * (self._steps - start_steps) / elapsed
                )
                metrics["time/updates_per_s"] = self._updates_in_window / elapsed
            if metrics and logger is not None:
                logger.log_metrics(metrics, step=self._steps)
        self._updates_in_window = 0
        self._window_start = (now, self._steps)

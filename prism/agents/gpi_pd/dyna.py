"""GPI-PD's Dyna part as a mixin of :class:`~prism.agents.gpi_pd.agent.GPIPDAgent`: when the model is fitted and
rolled out, the model buffer it fills, and the ``dyna/`` scalars (see the agent module's docstring).

The mixin uses the agent's ``config``, ``spec``, ``buffer``, ``per``, ``dynamics``, ``actor``, ``_weight`` and
the dyna attributes the agent initialises (``model_buffer``, ``_dyna_window``, ``_dynamics_fitted``).
"""

from __future__ import annotations

import numpy as np
import torch

from prism.agents.gpi_pd.dynamics import TERMINATION_FNS
from prism.data.replay import ReplayBuffer

ROLLOUT_CHUNK = 10_000


class DynaMixin:
    """Model fitting, uncertainty-filtered model rollouts into a model buffer, and ``dyna/`` logging."""

    # ---- Dyna -----------------------------------------------------------------------------------------
    def _ensure_dyna(self) -> None:
        """The model buffer and the Dyna generators on the agent's device (once; again if the device changed)."""
        if self.model_buffer is None or self.model_buffer.device != self.device:
            spec = self.spec
            self.model_buffer = ReplayBuffer(
                self.config.dynamics_buffer_size,
                spec.obs_dim,
                spec.act_dim,
                spec.n_objectives,
                self.device,
                key="agent.dynamics_buffer_size",
            )
            self._dyna_generator = self.member_generator(0, "dyna")
            self._model_replay_generator = self.member_generator(0, "model_replay")

    def _dyna_step(self) -> None:
        """After an env step (from ``learning_starts``): fit the model and/or roll it out when due."""
        cfg = self.config
        self._ensure_dyna()
        if self._steps % cfg.dynamics_train_freq == 0 and len(self.buffer) >= 2:
            result = self.dynamics.fit(self.buffer.all(0), self._dyna_generator)
            self._dynamics_fitted = True
            self._dyna_window["dyna/model_holdout_mse"] = float(np.mean(result.holdout_mse))
            self._dyna_window["dyna/fit_epochs"] = float(result.epochs)
        if (
            self._dynamics_fitted
            and self._steps >= cfg.dynamics_rollout_starts
            and self._steps % cfg.dynamics_rollout_freq == 0
        ):
            self._rollout_model()

    @torch.no_grad()
    def _exploring_policy(self, obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The acting policy with its exploration noise, noise from the Dyna stream (model rollouts)."""
        action = torch.tanh(self.actor(obs, weight))
        noise = torch.randn(action.shape, generator=self._dyna_generator, device=action.device)
        noise = (noise * self.config.policy_noise).clamp(-self.config.noise_clip, self.config.noise_clip)
        return (action + noise).clamp(-1.0, 1.0)

    @torch.no_grad()
    def _rollout_model(self) -> None:
        """One round of model rollouts from real start states into the model buffer (see the module docstring)."""
        cfg = self.config
        # Start states are drawn with replacement, as in morl-baselines: even while fewer real transitions are
        # stored, repeated starts give different imagined transitions (sampled elites, Gaussian heads, noise).
        n_starts = cfg.dynamics_rollout_batch_size
        weight = torch.as_tensor(np.asarray(self._weight, dtype=np.float32), device=self.device)
        termination_fn = TERMINATION_FNS.get(self.spec.id)
        kept = proposed = 0
        for start in range(0, n_starts, ROLLOUT_CHUNK):
            n = min(ROLLOUT_CHUNK, n_starts - start)
            index = self._draw_real(n, self._dyna_generator)
            rollout = self.dynamics.rollout(
                self.buffer.storage[0, index, : self.spec.obs_dim],
                self._exploring_policy,
                weight,
                horizon=cfg.dynamics_rollout_len,
                threshold=cfg.dynamics_min_uncertainty,
                generator=self._dyna_generator,
                termination_fn=termination_fn,
            )
            self.model_buffer.add_batch(rollout.batch)
            kept += int(rollout.batch.obs.shape[0])
            proposed += int(rollout.kept.numel())
        window = self._dyna_window
        window["dyna/rollout_kept"] = window.get("dyna/rollout_kept", 0.0) + kept
        window["_proposed"] = window.get("_proposed", 0.0) + proposed

    def _draw_real(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """``n`` real replay slots ``[n]``: by PER priority when ``per``, else uniform."""
        if self.config.per:
            return self.per.sample(n, [generator])[0]
        return torch.randint(int(self.buffer.sizes[0]), (n,), generator=generator, device=self.device)

    def _flush_logs(self) -> None:
        # The base writes train/, rollout/ and time/; the dyna/ scalars of the same window go with them.
        if self.dynamics is not None and self._window_start is not None:
            window, self._dyna_window = self._dyna_window, {}
            proposed = window.pop("_proposed", 0.0)
            if proposed > 0:
                window["dyna/rollout_dropped_frac"] = 1.0 - window["dyna/rollout_kept"] / proposed
            if self.model_buffer is not None:
                window["dyna/model_buffer_size"] = float(len(self.model_buffer))
            logger = self._loggers()[0]
            if window and logger is not None:
                logger.log_metrics(window, step=self._steps)
        super()._flush_logs()

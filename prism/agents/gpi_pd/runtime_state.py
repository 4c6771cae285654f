"""GPI-PD's runtime state for whole-run checkpoints, on top of the off-policy one
(:meth:`~prism.agents.off_policy.OffPolicyAgent.runtime_state`: replay, training env, random streams, clock).

What GPI-PD adds, under ``runtime["gpi_pd"]`` — everything a later step reads that is neither a parameter nor a
buffer of the module (those, the dynamics model's weights, input statistics and elites included, are in
``state_dict``; the actor/critic Adam states are the trainer's optimisers, saved as CAPQL's are):

- the PER priorities (:meth:`~prism.agents.gpi_pd.per.PrioritySampler.state_dict`);
- GPI-LS: the CCS with its weight support, the visited weights, the corner queue and its shuffle stream
  (:meth:`~prism.agents.gpi_pd.weight_support.GPILinearSupport.state_dict`), the acting weight, the iteration's
  weight set M, the support tensor used to double batches, and the stream M is redrawn from;
- the GPI-LS evaluation env mid-run (created lazily at the first iteration; between evaluations it sits at an
  episode end, but its reset stream — and a sparse wrapper's release stream — have moved on);
- the last actor terms (logged between policy updates);
- Dyna: the model buffer, the ``dyna`` and ``model_replay`` streams, whether the model has been fitted, and the
  ``dyna/`` scalars of the current logging window. The model's optimiser is created afresh by every fit, so it
  has no state to keep.

Numpy generators are stored as their bit-generator state (a dict of ints and strings), arrays as tensors of
their own dtype, so the checkpoint loads with ``torch.load(weights_only=True)`` and restores bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from prism.agents.gpi_pd.per import PrioritySampler
from prism.envs.state import get_env_state, rng_state, set_env_state, set_rng_state


class GPIPDRuntimeStateMixin:
    """:meth:`runtime_state` / :meth:`load_runtime_state` of :class:`~prism.agents.gpi_pd.agent.GPIPDAgent`
    (it owns every attribute used here); extends the off-policy base's through ``super()``."""

    def runtime_state(self) -> dict[str, Any]:
        state = super().runtime_state()
        state["gpi_pd"] = {
            "per": None if self.per is None else self.per.state_dict(),
            "linear_support": self.linear_support.state_dict(),
            "weight": torch.from_numpy(np.array(self._weight, copy=True)),
            "iteration_weights": torch.from_numpy(np.stack(self._iteration_weights).copy()),
            "support": None if self._support_t is None else self._support_t.detach().cpu().clone(),
            "weight_rng": rng_state(self._weight_rng),
            "eval_env": None if self._eval_env is None else get_env_state(self._eval_env),
            "last_actor": None if self._last_actor is None else self._last_actor.detach().cpu().clone(),
            "dyna": self._dyna_runtime_state(),
        }
        return state

    def _dyna_runtime_state(self) -> dict[str, Any] | None:
        if self.model_buffer is None:  # Dyna off, or before learning_starts: nothing built yet
            return None
        return {
            "model_buffer": self.model_buffer.state_dict(),
            "dyna_generator": self._dyna_generator.get_state(),
            "model_replay_generator": self._model_replay_generator.get_state(),
            "fitted": self._dynamics_fitted,
            "window": dict(self._dyna_window),
        }

    def load_runtime_state(self, state: dict[str, Any]) -> None:
        super().load_runtime_state(state)
        gpi = state["gpi_pd"]
        if gpi["per"] is not None:
            self.per = PrioritySampler(self.buffer_size, device=self.device)
            self.per.load_state_dict(gpi["per"])
        self.linear_support.load_state_dict(gpi["linear_support"])
        self._weight = gpi["weight"].numpy().copy()
        self._set_iteration_weights(list(gpi["iteration_weights"].numpy()))
        support = gpi["support"]
        self._support_t = None if support is None else support.to(self.device)
        set_rng_state(self._weight_rng, gpi["weight_rng"])
        if gpi["eval_env"] is not None:
            self._eval_env = self.env_factory(0)
            # A reset first, so every wrapper is initialised; the saved state then overwrites what it drew.
            self._eval_env.reset(seed=self.gpi_eval_seed)
            set_env_state(self._eval_env, gpi["eval_env"])
        last_actor = gpi["last_actor"]
        self._last_actor = None if last_actor is None else last_actor.to(self.device)
        dyna = gpi["dyna"]
        if dyna is not None:
            self._ensure_dyna()
            self.model_buffer.load_state_dict(dyna["model_buffer"])
            self._dyna_generator.set_state(dyna["dyna_generator"])
            self._model_replay_generator.set_state(dyna["model_replay_generator"])
            self._dynamics_fitted = bool(dyna["fitted"])
            self._dyna_window = dict(dyna["window"])

"""The runtime state of an :class:`~prism.agents.off_policy.OffPolicyAgent` for whole-run checkpoints: replay
rings, envs mid-episode, observations, random streams, preference block and episode bookkeeping."""

from __future__ import annotations

from typing import Any

import torch

from prism.envs.state import get_env_state, set_env_state
from prism.seeding import derive_seed


class RuntimeStateMixin:
    """:meth:`runtime_state` / :meth:`load_runtime_state` of :class:`~prism.agents.off_policy.OffPolicyAgent`
    (it owns every attribute used here)."""

    def runtime_state(self) -> dict[str, Any]:
        assert self.buffer is not None and self.envs and self._update_generator is not None
        return {
            "replay": self.buffer.state_dict(),
            "envs": [get_env_state(env) for env in self.envs],
            "obs": torch.as_tensor(self._obs),
            "preference_generators": [g.get_state() for g in self._pref_generators],
            "replay_generators": [g.get_state() for g in self._replay_generators],
            "update_generator": self._update_generator.get_state(),
            "weights": None if self._weights_t is None else self._weights_t.detach().cpu(),
            "weight_cursor": self._weight_cursor,
            "episode_return": torch.from_numpy(self._episode_return.copy()),
            "episode_length": torch.from_numpy(self._episode_length.copy()),
            "n_updates": self._n_updates,
            "divergence": self.divergence.state_dict(),
            # the open log window (its sums and update count), so a resumed run's window means are unchanged
            "log_window": None
            if self._train_sums is None
            else {"sums": self._train_sums.detach().cpu(), "updates": self._updates_in_window},
        }

    def load_runtime_state(self, state: dict[str, Any]) -> None:
        assert self.envs
        self._ensure_buffer()
        self._ensure_generators()
        self.buffer.load_state_dict(state["replay"])
        for m, env in enumerate(self.envs):
            env.reset(
                seed=derive_seed(self.seeds[m], "env")
            )  # a reset first, so every wrapper is initialised
            set_env_state(env, state["envs"][m])
        self._obs = state["obs"].numpy().copy()
        for g, s in zip(self._pref_generators, state["preference_generators"]):
            g.set_state(s)
        for g, s in zip(self._replay_generators, state["replay_generators"]):
            g.set_state(s)
        self._update_generator.set_state(state["update_generator"])
        if state["weights"] is not None:
            self._weights_t = state["weights"].to(self.device)
            self._weights_np = self._weights_t.cpu().numpy()
        self._weight_cursor = int(state["weight_cursor"])
        self._episode_return = state["episode_return"].numpy().copy()
        self._episode_length = state["episode_length"].numpy().copy()
        self._n_updates = int(state["n_updates"])
        self.divergence.load_state_dict(state.get("divergence"))  # absent before the watch: starts afresh
        window = state.get("log_window")  # absent before: the resumed run opens a fresh window, as it did
        self._restored_log_window = None if window is None else (window["sums"], int(window["updates"]))

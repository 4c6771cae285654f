"""Per-step reward-model inputs ``h_t`` (docs/method.md §4) and their standardisation statistics.

They sit in the data layer, below both the segment store / datamodule that build and scale them and the
reward models and shapers that consume them.

A step's raw inputs are ``[s_t, a_t, r_dense_t, s_{t+1}, d_t]``, of which a reward model reads a fixed choice
of column groups: ReSymNet ``[s_t, a_t, r_dense_t]`` (``[s_t, a_t]`` "w/o dense"; ``[..., d_t]`` with
``reward.terminal_feature``), RRD ``[s_t, a_t, s_{t+1}]`` (docs/method.md §4b, §4c). ``d_t`` is the termination
flag: 1 on the step that *terminates* its episode (the MDP's own end, e.g. a fall), 0 on every other step,
truncated last steps included. A model says which through its :class:`FeatureLayout` (``inputs``), the one place that
builds its features, for one step or a batch (:mod:`prism.reward.model`'s ``RewardModel`` contract).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

if TYPE_CHECKING:
    from prism.data.segments import SegmentStore


def dense_channels(n_objectives: int, sparse_channel: int) -> list[int]:
    """Indices of the dense reward channels: every channel except ``sparse_channel``, in order."""
    if not 0 <= sparse_channel < n_objectives:
        raise ValueError(f"sparse_channel {sparse_channel} out of range for {n_objectives} objectives")
    return [i for i in range(n_objectives) if i != sparse_channel]


def feature_dim(
    obs_dim: int,
    act_dim: int,
    n_objectives: int,
    use_dense: bool = True,
    next_obs: bool = False,
    terminal: bool = False,
) -> int:
    """Width of ``h_t``: ``obs + act (+ L − 1 dense rewards) (+ obs, the next observation) (+ 1, the
    termination flag)``."""
    dense = n_objectives - 1 if use_dense else 0
    return obs_dim + act_dim + dense + (obs_dim if next_obs else 0) + (1 if terminal else 0)


def build_features(
    obs: Tensor | np.ndarray,
    action: Tensor | np.ndarray,
    reward: Tensor | np.ndarray,
    sparse_channel: int,
    use_dense: bool = True,
    next_obs: Tensor | np.ndarray | None = None,
    terminated: Tensor | np.ndarray | bool | None = None,
) -> Tensor:
    """``h_t = [s_t, a_t, r_dense_t]`` as a float32 tensor ``[..., F]``; ``[..., s_{t+1}]`` appended when
    ``next_obs`` is given, then ``[..., d_t]`` when ``terminated`` is given (``[...]`` bools, or one bool for
    one step: 1.0 where the step terminated its episode, 0.0 elsewhere, truncation included).

    ``obs`` is the observation *before* the step, ``action`` the action sent and ``reward`` the step's reward
    vector ``[..., L]``; only its dense channels are used (the sparse one is dropped), so passing the emitted
    vector or the true one gives the same features. ``use_dense=False`` is the "w/o dense rewards"
    ablation, ``h_t = [s_t, a_t]``. ``next_obs`` is the observation the step led to (on an episode's last step
    the final observation ``env.step`` returned, before any reset), for a model that reads it
    (its :class:`FeatureLayout` has ``next_obs``). Leading batch dimensions are kept.
    """
    obs_t = torch.as_tensor(obs, dtype=torch.float32)
    act_t = torch.as_tensor(action, dtype=torch.float32, device=obs_t.device)
    parts = [obs_t, act_t]
    if use_dense:
        rew_t = torch.as_tensor(reward, dtype=torch.float32, device=obs_t.device)
        parts.append(rew_t[..., dense_channels(rew_t.shape[-1], sparse_channel)])
    if next_obs is not None:
        parts.append(torch.as_tensor(next_obs, dtype=torch.float32, device=obs_t.device))
    if terminated is not None:
        flag = torch.as_tensor(terminated, device=obs_t.device).to(torch.float32)
        parts.append(flag.reshape(*obs_t.shape[:-1], 1))
    return torch.cat(parts, dim=-1)


def write_features(
    row: np.ndarray,
    obs: np.ndarray,
    action: np.ndarray,
    reward: np.ndarray,
    sparse_channel: int,
    use_dense: bool = True,
    next_obs: np.ndarray | None = None,
    terminated: bool | None = None,
) -> np.ndarray:
    """:func:`build_features` of one step written in place into ``row`` (a float32 ``[F]`` array, e.g. the numpy
    view of a reused CPU tensor), so a per-step caller allocates no tensor; returns ``row``."""
    o, a = obs.shape[-1], action.shape[-1]
    row[:o] = obs
    row[o : o + a] = action
    end = o + a
    if use_dense:
        dense = dense_channels(reward.shape[-1], sparse_channel)
        row[end : end + len(dense)] = reward[dense]
        end += len(dense)
    if next_obs is not None:
        row[end : end + o] = next_obs
        end += o
    if terminated is not None:
        row[end] = 1.0 if terminated else 0.0
    return row


@dataclass(frozen=True)
class FeatureLayout:
    """Which column groups of a step a reward model reads: ``[s_t, a_t]``, the dense rewards ``r_dense_t``
    (``dense``), the next observation ``s_{t+1}`` (``next_obs``) and the termination flag ``d_t``
    (``terminal``), in that order."""

    dense: bool = True
    next_obs: bool = False
    terminal: bool = False

    def width(self, obs_dim: int, act_dim: int, n_objectives: int) -> int:
        """``F``, the features' width."""
        return feature_dim(obs_dim, act_dim, n_objectives, self.dense, self.next_obs, self.terminal)

    def _next(self, next_obs: Tensor | np.ndarray | None, key: str) -> Tensor | np.ndarray | None:
        if not self.next_obs:
            return None
        if next_obs is None:
            raise ValueError(f"{key}: the reward model reads the next observation; none was given")
        return next_obs

    def _flag(self, terminated, key: str):
        if not self.terminal:
            return None
        if terminated is None:
            raise ValueError(f"{key}: the reward model reads the termination flag; none was given")
        return terminated

    def build(
        self,
        obs: Tensor | np.ndarray,
        action: Tensor | np.ndarray,
        reward: Tensor | np.ndarray,
        sparse_channel: int,
        next_obs: Tensor | np.ndarray | None = None,
        *,
        terminated: Tensor | np.ndarray | bool | None = None,
        key: str = "reward.name",
    ) -> Tensor:
        """:func:`build_features` with this layout's columns (``next_obs`` and ``terminated`` are read only when
        the layout has them, and then required: a one-line ``ValueError`` starting with ``key``)."""
        nxt, flag = self._next(next_obs, key), self._flag(terminated, key)
        return build_features(obs, action, reward, sparse_channel, self.dense, nxt, flag)

    def write(
        self,
        row: np.ndarray,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        sparse_channel: int,
        next_obs: np.ndarray | None = None,
        terminated: bool | None = None,
    ) -> np.ndarray:
        """:func:`write_features` with this layout's columns, in place into ``row``."""
        nxt, flag = self._next(next_obs, "reward.name"), self._flag(terminated, "reward.name")
        return write_features(row, obs, action, reward, sparse_channel, self.dense, nxt, flag)  # type: ignore[arg-type]

    def of_store(self, store: SegmentStore) -> Tensor:
        """Every stored step's features ``[N, F]`` (:meth:`SegmentStore.inputs`)."""
        return store.inputs(self.dense, self.next_obs, self.terminal)


def standardisation_stats(features: Tensor, eps: float = 1e-8) -> tuple[Tensor, Tensor]:
    """Column mean and population std of ``features [N, F]``; a (near-)zero-variance column gets scale 1."""
    mean = features.mean(dim=0)
    std = features.std(dim=0, correction=0)
    # A constant feature (e.g. an always-0 dense channel) would otherwise divide by 0.
    scale = torch.where(std > eps, std, torch.ones_like(std))
    return mean, scale

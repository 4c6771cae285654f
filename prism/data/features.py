"""Per-step reward-model inputs ``h_t`` (docs/method.md §4) and their standardisation statistics.

They sit in the data layer, below both the segment store / datamodule that build and scale them and the
reward models and shapers that consume them.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def dense_channels(n_objectives: int, sparse_channel: int) -> list[int]:
    """Indices of the dense reward channels: every channel except ``sparse_channel``, in order."""
    if not 0 <= sparse_channel < n_objectives:
        raise ValueError(f"sparse_channel {sparse_channel} out of range for {n_objectives} objectives")
    return [i for i in range(n_objectives) if i != sparse_channel]


def feature_dim(obs_dim: int, act_dim: int, n_objectives: int, use_dense: bool = True) -> int:
    """Width of ``h_t``: ``obs + act (+ L − 1 dense rewards)``."""
    return obs_dim + act_dim + (n_objectives - 1 if use_dense else 0)


def build_features(
    obs: Tensor | np.ndarray,
    action: Tensor | np.ndarray,
    reward: Tensor | np.ndarray,
    sparse_channel: int,
    use_dense: bool = True,
) -> Tensor:
    """``h_t = [s_t, a_t, r_dense_t]`` as a float32 tensor ``[..., F]``.

    ``obs`` is the observation *before* the step, ``action`` the action sent and ``reward`` the step's reward
    vector ``[..., L]``; only its dense channels are used (the sparse one is dropped), so passing the emitted
    vector or the true one gives the same features. ``use_dense=False`` is the "w/o dense rewards"
    ablation, ``h_t = [s_t, a_t]``. Leading batch dimensions are kept.
    """
    obs_t = torch.as_tensor(obs, dtype=torch.float32)
    act_t = torch.as_tensor(action, dtype=torch.float32, device=obs_t.device)
    parts = [obs_t, act_t]
    if use_dense:
        rew_t = torch.as_tensor(reward, dtype=torch.float32, device=obs_t.device)
        parts.append(rew_t[..., dense_channels(rew_t.shape[-1], sparse_channel)])
    return torch.cat(parts, dim=-1)


def write_features(
    row: np.ndarray,
    obs: np.ndarray,
    action: np.ndarray,
    reward: np.ndarray,
    sparse_channel: int,
    use_dense: bool = True,
) -> np.ndarray:
    """:func:`build_features` of one step written in place into ``row`` (a float32 ``[F]`` array, e.g. the numpy
    view of a reused CPU tensor), so a per-step caller allocates no tensor; returns ``row``."""
    o, a = obs.shape[-1], action.shape[-1]
    row[:o] = obs
    row[o : o + a] = action
    if use_dense:
        row[o + a :] = reward[dense_channels(reward.shape[-1], sparse_channel)]
    return row


def standardisation_stats(features: Tensor, eps: float = 1e-8) -> tuple[Tensor, Tensor]:
    """Column mean and population std of ``features [N, F]``; a (near-)zero-variance column gets scale 1."""
    mean = features.mean(dim=0)
    std = features.std(dim=0, correction=0)
    # A constant feature (e.g. an always-0 dense channel) would otherwise divide by 0.
    scale = torch.where(std > eps, std, torch.ones_like(std))
    return mean, scale

"""Per-step reward-model inputs ``h_t`` (SPEC §4)."""

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

"""Pure functions for the reward model's objective (paper eq. 1)."""

from __future__ import annotations

import torch
from torch import Tensor


def segment_sums(values: Tensor, segment_ids: Tensor, num_segments: int) -> Tensor:
    """Per-segment sums of per-step values, without a Python loop.

    Args:
        values: ``[..., N]`` per-step values (leading dims, e.g. ensemble members, are batched).
        segment_ids: ``[..., N]`` long, same shape, each in ``[0, num_segments]``. The extra id
            ``num_segments`` is a *padding* slot: its sum is computed and discarded, so padded steps
            contribute nothing (and receive zero gradient).
        num_segments: number B of real segments.

    Returns:
        ``[..., B]`` with ``out[..., b] = Σ_{t: segment_ids[..., t] = b} values[..., t]``.
    """
    out = values.new_zeros((*values.shape[:-1], num_segments + 1))
    return out.scatter_add(-1, segment_ids, values)[..., :num_segments]


def trajectory_sum_loss(step_rewards: Tensor, segment_ids: Tensor, targets: Tensor) -> Tensor:
    """Trajectory-sum regression loss (paper eq. 1), one value per ensemble member.

    ``L = mean_i (Σ_{t ∈ seg_i} r̂(h_t) − R_i)²`` over the B segments of a batch.

    Args:
        step_rewards: ``[K, N]`` predicted per-step rewards r̂(h_t) (K members, N padded steps).
        segment_ids: ``[K, N]`` segment of each step in ``[0, B]`` (``B`` marks padding).
        targets: ``[K, B]`` released sums R_i.

    Returns:
        ``[K]`` the loss of each member. Sum (not average) it over members before ``backward`` so each
        member's gradient is exactly the gradient of its own loss.
    """
    sums = segment_sums(step_rewards, segment_ids, targets.shape[-1])
    return (sums - targets).pow(2).mean(dim=-1)


def pearson_correlation(x: Tensor, y: Tensor, eps: float = 1e-12) -> Tensor:
    """Pearson correlation of two 1-D tensors (population moments); 0 when either is constant."""
    xc = x - x.mean()
    yc = y - y.mean()
    denom = torch.sqrt((xc * xc).sum() * (yc * yc).sum())
    return torch.where(denom > eps, (xc * yc).sum() / denom.clamp_min(eps), torch.zeros_like(denom))

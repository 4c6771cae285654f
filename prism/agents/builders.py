"""Small construction helpers shared by every backbone (argument normalisation, optimisers)."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import torch

MemberEnvFactory = Callable[[int], gym.Env]
"""``env_factory(member) -> env`` (dense, or a sparse wrapper whose release draws come from the member's seed)."""


def adam(params, lr: float, capturable: bool = False) -> torch.optim.Adam:
    """Adam over ``params`` (tensors, or param-group dicts with their own options such as ``weight_decay``);
    ``capturable=True`` (CUDA only) keeps the step counts on the device so a CUDA graph may capture the step."""
    # The fused kernel (CPU and CUDA since torch 2.4) does a whole Adam step in one call; older torch
    # rejects fused=True on CPU, where the multi-tensor (foreach) path is the next best. Adam is element-wise,
    # so one optimiser over stacked member parameters is exactly S independent optimisers.
    params = list(params)
    extra = {"capturable": True} if capturable else {}
    try:
        return torch.optim.Adam(params, lr=lr, fused=True, **extra)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(params, lr=lr, foreach=True)

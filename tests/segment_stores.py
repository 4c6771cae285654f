"""Synthetic segment stores with a known per-step reward, shared by the reward-model tests."""

from __future__ import annotations

import torch

from prism.data.datamodule import TrajectorySumDataModule
from prism.data.segments import SegmentStore


def synthetic_store(n_seg: int, seed: int = 0, *, max_length: int = 40, dense: bool = True) -> SegmentStore:
    """``n_seg`` segments of 2..``max_length`` steps with per-step reward r = x0 + 0.5·x1² (features: obs 3,
    act 1, and one dense column when ``dense``); each segment's sum is released at its last step."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, max_length + 1, (n_seg,), generator=g)
    n = int(lengths.sum())
    x = torch.randn(n, 5 if dense else 4, generator=g)
    r = x[:, 0] + 0.5 * x[:, 1] ** 2
    ends = torch.cumsum(lengths, 0) - 1
    released = torch.zeros(n, dtype=torch.bool)
    released[ends] = True
    seg = torch.repeat_interleave(torch.arange(n_seg), lengths)
    emitted = torch.zeros(n)
    emitted[ends] = torch.zeros(n_seg).index_add_(0, seg, r)
    store = SegmentStore(3, 1, 1 if dense else 0)
    store.add_episode(x, released, emitted, r)
    return store


def set_dtype(dm: TrajectorySumDataModule, dtype: torch.dtype) -> None:
    """A set-up data module's features, targets and validation batches in ``dtype`` (float64: rounding cannot
    grow into a visible difference over a fit's epochs)."""
    dm.features = dm.features.to(dtype)
    dm.targets = dm.targets.to(dtype)
    dm._val_batches = dm._build_val_batches()

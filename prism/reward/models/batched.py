"""The stacked LayerNorm of :class:`~prism.reward.models.resymnet.ReSymNetEnsemble` (its linear layers are
:class:`prism.core.stacked_linear.StackedLinear`, shared with every stacked network), and the per-member seeds of the
reward models' stacked networks."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def member_seed_list(n_members: int, member_seeds: Sequence[int] | None) -> list[int]:
    """One initialisation seed per member: ``member_seeds`` as ints (``0..K-1`` when None); a list of another
    length is refused."""
    seeds = list(range(n_members)) if member_seeds is None else [int(s) for s in member_seeds]
    if len(seeds) != n_members:
        raise ValueError(f"member_seeds: expected {n_members} seeds, got {len(seeds)}")
    return seeds


class BatchedLayerNorm(nn.Module):
    """LayerNorm over the last dim with a separate affine per member (``weight``/``bias`` ``[K, 1, H]``)."""

    def __init__(self, n_members: int, width: int, eps: float = 1e-5):
        super().__init__()
        self.width, self.eps = width, eps
        self.weight = nn.Parameter(torch.ones(n_members, 1, width))
        self.bias = nn.Parameter(torch.zeros(n_members, 1, width))

    def reset_member(self, k: int) -> None:
        with torch.no_grad():
            self.weight[k].fill_(1.0)
            self.bias[k].zero_()

    def forward(self, x: Tensor) -> Tensor:
        return torch.addcmul(self.bias, F.layer_norm(x, (self.width,), eps=self.eps), self.weight)

    def member(self, k: int, x: Tensor) -> Tensor:
        """Member ``k`` alone on ``x [N, H]``: the affine fused into ``F.layer_norm`` (one kernel forward and
        backward instead of three; the same values up to float rounding)."""
        return F.layer_norm(x, (self.width,), self.weight[k, 0], self.bias[k, 0], self.eps)

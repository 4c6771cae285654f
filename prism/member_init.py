"""Initialising one member's slice of a stacked linear layer: the one building block the agents' stacked MLPs
(:class:`prism.agents.networks.StackedMLP`) and the reward models' batched layers
(:class:`prism.reward.models.batched.BatchedLinear`) share.

Both store a layer of K members as ``weight [K, in, out]`` and ``bias [K, 1, out]``; member k's slice starts
as an independent ``nn.Linear(in, out)`` would, so member k of a stack starts from exactly the weights of a
lone network drawn from the same generator.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

INITS = ("orthogonal", "kaiming", "output", "xavier")
"""``orthogonal``: the agents' layers (SB3/CleanRL's ``orthogonal_``, gain 1); ``kaiming``: ReSymNet's hidden
layers (Kaiming-uniform for ReLU); ``output``: ReSymNet's output layer (Xavier-uniform, gain 0.01);
``xavier``: every layer of RRD's network (Xavier-uniform, gain 1: TensorFlow's ``xavier_initializer``)."""


@torch.no_grad()
def init_member_(weight: Tensor, bias: Tensor, kind: str, generator: torch.Generator | None) -> None:
    """Initialise one member's slice in place: ``weight [in, out]`` by ``kind`` (:data:`INITS`), drawn from
    ``generator`` (the global RNG when None), and ``bias`` to zero."""
    # nn.init works on nn.Linear's [out, in] layout (fan_in = in): draw that contiguous, store it transposed
    # (an in-place draw on the transposed view could fill it in memory order, not nn.Linear's).
    w = weight.new_empty((weight.shape[1], weight.shape[0]))
    if kind == "orthogonal":
        nn.init.orthogonal_(w, generator=generator)
    elif kind == "kaiming":
        nn.init.kaiming_uniform_(w, nonlinearity="relu", generator=generator)
    elif kind == "output":
        nn.init.xavier_uniform_(w, gain=0.01, generator=generator)
    elif kind == "xavier":
        nn.init.xavier_uniform_(w, generator=generator)
    else:
        raise ValueError(f"init_member_: kind must be one of {', '.join(INITS)}, got {kind!r}")
    weight.copy_(w.T)
    bias.zero_()

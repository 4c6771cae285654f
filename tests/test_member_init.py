"""One member's slice of a stacked linear layer starts as a lone ``nn.Linear`` drawn from the same generator
would (prism/member_init.py), for the agents' stacked MLPs and the reward models' batched layers alike."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from prism.agents.networks import StackedMLP
from prism.member_init import INITS, init_member_
from prism.reward.models.batched import BatchedLinear

DRAWS = {
    "orthogonal": lambda w, g: nn.init.orthogonal_(w, generator=g),
    "kaiming": lambda w, g: nn.init.kaiming_uniform_(w, nonlinearity="relu", generator=g),
    "output": lambda w, g: nn.init.xavier_uniform_(w, gain=0.01, generator=g),
    "xavier": lambda w, g: nn.init.xavier_uniform_(w, generator=g),
}


@pytest.mark.parametrize("kind", INITS)
def test_a_members_slice_is_nn_linears_draw_transposed_with_zero_bias(kind):
    weight, bias = torch.randn(3, 5, 7), torch.randn(3, 1, 7)
    init_member_(weight[1], bias[1], kind, torch.Generator().manual_seed(4))
    expected = torch.empty(7, 5)  # nn.Linear(5, 7).weight's layout
    DRAWS[kind](expected, torch.Generator().manual_seed(4))
    assert torch.equal(weight[1], expected.T) and torch.equal(bias[1], torch.zeros(1, 7))
    assert not torch.equal(weight[0], weight[1]) and bias[0].abs().sum() > 0  # the other slices untouched


def test_the_agents_stacked_mlp_and_the_reward_models_batched_layer_draw_the_same_slice():
    mlp = StackedMLP([5, 7, 3], 2)
    mlp.init_slice(1, torch.Generator().manual_seed(9))
    layers = [BatchedLinear(2, 5, 7), BatchedLinear(2, 7, 3)]
    g = torch.Generator().manual_seed(9)
    for layer in layers:
        layer.reset_member(1, g, "orthogonal")
    for w, layer in zip(mlp.weights, layers, strict=True):
        assert torch.equal(w[1], layer.weight[1])


def test_an_unknown_kind_is_refused_in_one_line():
    with pytest.raises(
        ValueError, match="^init_member_: kind must be one of orthogonal, kaiming, output, xavier"
    ):
        init_member_(torch.zeros(2, 3), torch.zeros(1, 3), "normal", None)

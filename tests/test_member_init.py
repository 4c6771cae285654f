"""One member's slice of a stacked linear layer starts as a lone ``nn.Linear`` drawn from the same generator
would (prism/core/stacked_linear.py), for the agents' stacked MLPs and the reward models' stacked layers alike, and
both run the layer the same way."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from prism.agents.networks import StackedMLP
from prism.core.stacked_linear import INITS, StackedLinear, init_member_

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


def test_the_agents_stacked_mlp_and_the_reward_models_stacked_layer_draw_the_same_slice():
    mlp = StackedMLP([5, 7, 3], 2)
    mlp.init_slice(1, torch.Generator().manual_seed(9))
    layers = [StackedLinear(2, 5, 7), StackedLinear(2, 7, 3)]
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


def test_the_agents_stacked_mlp_runs_the_reward_models_stacked_layers():
    """A StackedMLP is StackedLinear layers with ReLUs between: the same weights give the same outputs, bit for
    bit, for every member and for one member alone (``member=``)."""
    mlp = StackedMLP([5, 7, 3], 3)
    layers = [StackedLinear(3, 5, 7), StackedLinear(3, 7, 3)]
    for k in range(3):
        mlp.init_slice(k, torch.Generator().manual_seed(20 + k))
        g = torch.Generator().manual_seed(20 + k)
        for layer in layers:
            layer.reset_member(k, g, "orthogonal")
        for b, layer in zip(mlp.biases, layers, strict=True):  # non-zero biases, so that they count too
            b.data[k] = layer.bias.data[k] = torch.randn(layer.bias.shape[1:], generator=g)
    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(1))
    expected = layers[1](torch.relu(layers[0](x)))
    assert torch.equal(mlp(x), expected)
    assert torch.equal(mlp(x[2:3], member=2), expected[2:3])
    hidden = torch.relu(layers[0](x))
    # One member alone on its own steps (the ragged fit's path; oneDNN on a CPU): the same maths.
    torch.testing.assert_close(layers[1].member(1, hidden[1]), expected[1])
    # One input for every member ([N, in]: prediction's wide GEMM): the same maths.
    torch.testing.assert_close(layers[0](x[0]), layers[0](x[0].expand(3, -1, -1)))

"""agent.critic_layer_norm (issue 60's stabiliser): each critic slice is ReLU(LayerNorm(x W + b)) per hidden layer,
exactly nn.Linear → nn.LayerNorm → ReLU with that slice's weights; slices stay independent; off changes nothing."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from prism.agents.config import CAPQLConfig
from prism.agents.networks import StackedMLP, VectorCriticEnsemble


def _reference(net: StackedMLP, index: int) -> nn.Sequential:
    """Slice ``index`` of ``net`` as plain torch modules."""
    layers: list[nn.Module] = []
    hidden = len(net.dims) - 2
    for j, (w, b) in enumerate(zip(net.weights, net.biases)):
        linear = nn.Linear(w.shape[1], w.shape[2])
        linear.weight.data.copy_(w[index].T)
        linear.bias.data.copy_(b[index, 0])
        layers.append(linear)
        if j < hidden:
            norm = nn.LayerNorm(w.shape[2])
            norm.weight.data.copy_(net.norm_gains[j][index, 0])
            norm.bias.data.copy_(net.norm_biases[j][index, 0])
            layers += [norm, nn.ReLU()]
    return nn.Sequential(*layers)


def test_each_slice_is_linear_layernorm_relu():
    torch.manual_seed(0)
    net = StackedMLP([5, 16, 16, 3], n=4, layer_norm=True)
    for k in range(4):
        net.init_slice(k, torch.Generator().manual_seed(k))
    with torch.no_grad():  # gains and biases away from 1 and 0, so that they matter
        for gain, bias in zip(net.norm_gains, net.norm_biases):
            gain.uniform_(0.5, 1.5)
            bias.uniform_(-0.3, 0.3)
    x = torch.randn(4, 7, 5)
    out = net(x)
    for k in range(4):
        torch.testing.assert_close(out[k], _reference(net, k)(x[k]), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(net(x[k : k + 1], member=k)[0], out[k])


def test_slices_stay_independent_and_detached_weights_get_no_gradient():
    net = StackedMLP([5, 8, 2], n=3, layer_norm=True)
    for k in range(3):
        net.init_slice(k, None)
    x = torch.randn(3, 4, 5, requires_grad=True)
    net(x)[0].sum().backward()
    assert net.norm_gains[0].grad[1:].abs().sum() == 0 and net.norm_gains[0].grad[0].abs().sum() > 0
    net.zero_grad(set_to_none=True)
    net(x, detach_params=True).sum().backward()
    assert all(p.grad is None for p in net.parameters()) and x.grad is not None


def test_off_by_default_adds_no_parameter():
    plain = VectorCriticEnsemble(6, 2, (8, 8), n=2, members=2)
    normed = VectorCriticEnsemble(6, 2, (8, 8), n=2, members=2, layer_norm=True)
    assert not any("norm" in key for key in plain.state_dict())
    assert {key for key in normed.state_dict() if "norm" in key} == {
        "net.norm_gains.0", "net.norm_gains.1", "net.norm_biases.0", "net.norm_biases.1"
    }  # fmt: skip
    # A LayerNorm critic's output is bounded by its last layer whatever the input's scale.
    x = torch.randn(2, 5, 6)
    q_small, q_huge = normed(x), normed(1e6 * x)
    assert q_huge.abs().max() < 10 * (q_small.abs().max() + 1)
    assert plain(1e6 * x).abs().max() > 1e4


def test_the_key_is_checked():
    assert CAPQLConfig(critic_layer_norm=True).critic_layer_norm is True
    with pytest.raises(ValueError, match=r"^agent\.critic_layer_norm"):
        CAPQLConfig(critic_layer_norm="yes")


def test_a_run_trains_the_norms_and_polyak_moves_their_targets(tmp_path):
    from pathlib import Path

    from toy_runs import toy_run

    from prism.cli import main

    quickstart = str(Path(__file__).resolve().parents[1] / "conf" / "quickstart.yaml")
    run_dir = tmp_path / "run"
    main(["fit", "--config", quickstart, *toy_run({"method": "oracle", "env.dense": "true",
          "reward.name": "none", "agent.symreg_lambda": 0, "agent.critic_layer_norm": "true"}), f"run_dir={run_dir}"])  # fmt: skip
    agent = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)["agent"]
    gain, target_gain = agent["critic.net.norm_gains.0"], agent["critic_target.net.norm_gains.0"]
    assert not torch.equal(gain, torch.ones_like(gain))  # trained
    assert not torch.equal(target_gain, torch.ones_like(gain)) and not torch.equal(
        target_gain, gain
    )  # τ-averaged

"""CAPQL losses (docs/method.md §6) on synthetic batches, and gradient isolation between actor and
critics."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Normal, TransformedDistribution
from torch.distributions.transforms import TanhTransform

from prism.agents.losses import (
    actor_loss,
    capql_actor_loss,
    capql_critic_loss,
    critic_loss,
    critic_target,
)
from prism.agents.networks import GaussianActor, VectorCriticEnsemble, sample_tanh_gaussian
from prism.data.replay import ReplayBatch

OBS, ACT, L = 5, 2, 2


def _batch(b: int = 16, seed: int = 0) -> ReplayBatch:
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(b, L, generator=g)
    return ReplayBatch(
        obs=torch.randn(b, OBS, generator=g),
        action=torch.rand(b, ACT, generator=g) * 2 - 1,
        reward=torch.randn(b, L, generator=g),
        next_obs=torch.randn(b, OBS, generator=g),
        done=(torch.rand(b, generator=g) < 0.3).float(),
        weight=w / w.sum(1, keepdim=True),
    )


def _nets():
    torch.manual_seed(0)
    actor = GaussianActor(OBS, L, ACT, [32, 32])
    critic = VectorCriticEnsemble(OBS + ACT + L, L, [32, 32], n=2)
    target = VectorCriticEnsemble(OBS + ACT + L, L, [32, 32], n=2).requires_grad_(False)
    return actor, critic, target


def test_critic_target_terminated_vs_truncated_hand_made_batch():
    # Row 0 terminated (done=1): y = r. Row 1 was *truncated* — stored done=0 — so it bootstraps.
    reward = torch.tensor([[1.0, 2.0], [1.0, 2.0]])
    done = torch.tensor([1.0, 0.0])
    # Critic 0 is the smaller one on objective 0, critic 1 on objective 1: the min is per component.
    next_q = torch.tensor([[[10.0, 30.0], [10.0, 30.0]], [[20.0, 5.0], [20.0, 5.0]]])
    next_log_prob = torch.tensor([-1.0, -1.0])
    y = critic_target(reward, done, next_q, next_log_prob, gamma=0.5, alpha=0.2)
    # soft next value per component: min_k Q - α log π = [10, 5] + 0.2 (the bonus on every component)
    expected = torch.tensor([[1.0, 2.0], [1.0 + 0.5 * 10.2, 2.0 + 0.5 * 5.2]])
    torch.testing.assert_close(y, expected)


def test_critic_loss_is_mean_of_per_critic_mse():
    q = torch.randn(2, 8, L, requires_grad=True)
    target = torch.randn(8, L)
    out = critic_loss(q, target)
    expected = 0.5 * sum(torch.nn.functional.mse_loss(q[k], target) for k in range(2))
    torch.testing.assert_close(out.loss, expected)
    assert not out.target.requires_grad


def test_actor_loss_value():
    log_prob = torch.tensor([-1.0, 0.5])
    q = torch.tensor([[[1.0, 4.0], [2.0, 0.0]], [[3.0, 2.0], [1.0, 1.0]]])  # min -> [[1,2],[1,0]]
    weight = torch.tensor([[0.5, 0.5], [0.25, 0.75]])
    loss, alpha_log_pi = actor_loss(log_prob, q, weight, alpha=0.2)
    expected = ((0.2 * -1.0 - 1.5) + (0.2 * 0.5 - 0.25)) / 2
    assert loss.item() == pytest.approx(expected)
    assert alpha_log_pi.item() == pytest.approx(0.2 * -0.25)


def test_tanh_gaussian_log_prob_matches_change_of_variables():
    mean = torch.randn(64, 3, generator=torch.Generator().manual_seed(1)) * 2
    log_std = torch.randn(64, 3, generator=torch.Generator().manual_seed(2)).clamp(-2, 1)
    action, log_prob = sample_tanh_gaussian(mean, log_std, generator=torch.Generator().manual_seed(3))
    # Same draw, reference in float64: log N(u; μ, σ) − log(1 − tanh² u), summed over action dims.
    eps = torch.randn(64, 3, generator=torch.Generator().manual_seed(3)).double()
    u = mean.double() + log_std.double().exp() * eps
    reference = Normal(mean.double(), log_std.double().exp()).log_prob(u) - torch.log1p(-(torch.tanh(u) ** 2))
    torch.testing.assert_close(action.double(), torch.tanh(u), atol=1e-6, rtol=0)
    torch.testing.assert_close(log_prob.double(), reference.sum(-1), atol=1e-3, rtol=1e-5)
    # and torch.distributions agrees where tanh is not saturated
    ok = (u.abs() < 3).all(1)
    ref2 = TransformedDistribution(Normal(mean, log_std.exp()), [TanhTransform()]).log_prob(action).sum(-1)
    torch.testing.assert_close(log_prob[ok], ref2[ok], atol=5e-3, rtol=1e-4)


def test_log_std_clamped():
    actor = GaussianActor(OBS, L, ACT, [8])
    with torch.no_grad():
        actor.net.biases[-1][..., ACT:] = 100.0
    _, log_std = actor(torch.zeros(3, OBS), torch.full((3, L), 0.5))
    assert log_std.max().item() == 2.0


@pytest.mark.parametrize("symreg_lambda", [0.0, 0.5])
def test_actor_loss_leaves_no_gradient_on_critics(symreg_lambda):
    actor, critic, _ = _nets()
    signs = (torch.tensor([1.0, 1.0, -1.0, -1.0, 1.0]), -torch.ones(ACT))
    out = capql_actor_loss(actor, critic, _batch(), 0.2, symreg_lambda, *signs)
    out.loss.backward()
    assert all(p.grad is None for p in critic.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in actor.parameters())
    assert math.isfinite(out.loss.item())


def _hand_mlp(x: torch.Tensor, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """x Wᵀ + b through ``layers`` (float64) with ReLU between: an independent forward pass."""
    h = x.double()
    for j, (w, b) in enumerate(layers):
        h = h @ w.double().T + b.double()
        if j < len(layers) - 1:
            h = torch.relu(h)
    return h


def _hand_actor(actor: GaussianActor, obs: torch.Tensor, weight: torch.Tensor):
    # member 0's layer j: weights[j][0] is [d_in, d_out] (applied as x W), biases[j][0] is [1, d_out]
    layers = [(w[0].T, b[0, 0]) for w, b in zip(actor.net.weights, actor.net.biases)]
    out = _hand_mlp(torch.cat([obs, weight], 1), layers)
    return out[:, :ACT], out[:, ACT:].clamp(-20.0, 2.0)


def _hand_critic_member(ensemble: VectorCriticEnsemble, k: int, x: torch.Tensor) -> torch.Tensor:
    # Member k's layer j is weights[j][k] ([d_in, d_out], applied as x W) and biases[j][k] ([1, d_out]).
    return _hand_mlp(x, [(w[k].T, b[k, 0]) for w, b in zip(ensemble.net.weights, ensemble.net.biases)])


def _hand_soft_target(actor, q_net, batch: ReplayBatch, eps: torch.Tensor, gamma: float, alpha: float):
    """The critic target of docs/method.md §6, in float64:
    y = r + γ(1 − done)(min_k Q_k(s', a', w) − α log π(a'|s', w)).
    """
    mean, log_std = _hand_actor(actor, batch.next_obs, batch.weight)
    u = mean + log_std.exp() * eps.double()
    next_action = torch.tanh(u)
    log_prob = (Normal(mean, log_std.exp()).log_prob(u) - torch.log1p(-(next_action**2))).sum(-1)
    x = torch.cat([batch.next_obs.double(), next_action, batch.weight.double()], 1)
    next_q = torch.stack([_hand_critic_member(q_net, k, x) for k in range(q_net.n)]).min(0).values
    soft = next_q - alpha * log_prob.unsqueeze(-1)
    return batch.reward.double() + gamma * (1 - batch.done.double()).unsqueeze(-1) * soft


def test_critic_loss_bootstraps_from_the_target_critics_and_sends_no_gradient_to_actor_or_targets():
    actor, critic, target = _nets()
    # Target weights deliberately far from the online ones (as after many lagging Polyak steps), so a loss that
    # bootstrapped from the online critic would give a different number.
    with torch.no_grad():
        target.load_state_dict(critic.state_dict())
        for p in target.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    batch, gamma, alpha = _batch(), 0.9, 0.2
    torch.manual_seed(7)
    out = capql_critic_loss(actor, critic, target, batch, gamma, alpha)
    torch.manual_seed(7)
    eps = torch.randn(batch.obs.shape[0], ACT)  # the same draw a' was sampled with
    expected = _hand_soft_target(actor, target, batch, eps, gamma, alpha)
    with_online = _hand_soft_target(actor, critic, batch, eps, gamma, alpha)
    torch.testing.assert_close(out.target.double(), expected, atol=1e-4, rtol=1e-4)
    assert (with_online - expected).abs().max() > 0.1  # the check can tell the two critics apart
    assert torch.equal(out.target[batch.done == 1], batch.reward[batch.done == 1])  # terminal rows: y = r
    # The loss regresses the *online* critics on y.
    x = torch.cat([batch.obs, batch.action, batch.weight], 1)
    q = torch.stack([_hand_critic_member(critic, k, x) for k in range(2)])
    torch.testing.assert_close(out.loss.double(), (q - expected).square().mean(), atol=1e-4, rtol=1e-4)

    out.loss.backward()
    assert all(p.grad is None for p in actor.parameters())
    assert all(p.grad is None for p in target.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in critic.parameters())


def test_critic_ensemble_members_are_independent_mlps():
    torch.manual_seed(0)
    critic = VectorCriticEnsemble(7, 2, [16, 16], n=2)
    x = torch.randn(5, 7)
    q = critic(x)
    for k in range(2):
        h = x
        for j, (w, b) in enumerate(zip(critic.net.weights, critic.net.biases)):
            h = h @ w[k] + b[k]
            if j < 2:
                h = torch.relu(h)
        torch.testing.assert_close(q[k], h)
    assert not torch.allclose(q[0], q[1])

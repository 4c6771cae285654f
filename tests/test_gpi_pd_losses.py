"""GPI-PD losses against hand computations (morl-baselines' GPIPDContinuousAction semantics)."""

from __future__ import annotations

import pytest
import torch

from prism.agents.gpi_pd.losses import (
    critic_mse,
    deterministic_symreg,
    gpi_pd_actor_loss,
    gpi_pd_critic_loss,
    policy_objective,
    smoothed_target_action,
    td_priority,
    td_target,
)
from prism.agents.gpi_pd.networks import DeterministicActor, VectorCritics
from prism.data.replay import ReplayBatch


def test_smoothed_target_action_by_hand():
    mean = torch.tensor([[0.0, 2.0, -0.3]])
    eps = torch.tensor([[1.0, 10.0, -10.0]])  # 0.2, clipped 0.5, clipped −0.5
    got = smoothed_target_action(mean, eps, noise_std=0.2, noise_clip=0.5)
    want = torch.tensor(
        [
            [
                0.2,
                min(1.0, torch.tanh(torch.tensor(2.0)).item() + 0.5),
                torch.tanh(torch.tensor(-0.3)).item() - 0.5,
            ]
        ]
    )
    torch.testing.assert_close(got, want)


def test_td_target_takes_the_whole_vector_of_the_scalarised_min_critic():
    # Row 0: w·Q̄_1 = 1.5 > w·Q̄_2 = 1 -> critic 2's vector [1, 1] (an elementwise min would give [1, 0]).
    # Row 1: w = [1, 0]: w·Q̄_1 = 0 < w·Q̄_2 = 2 -> critic 1's vector [0, 5].
    next_q = torch.tensor([[[3.0, 0.0], [0.0, 5.0]], [[1.0, 1.0], [2.0, -1.0]]])  # [n=2, B=2, L=2]
    weight = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    reward = torch.tensor([[1.0, 2.0], [0.5, 0.5]])
    done = torch.tensor([0.0, 1.0])
    y = td_target(reward, done, next_q, weight, gamma=0.9)
    torch.testing.assert_close(y, torch.tensor([[1.0 + 0.9, 2.0 + 0.9], [0.5, 0.5]]))


def test_critic_mse_priority_and_policy_objective_by_hand():
    q = torch.tensor([[[1.0, 2.0]], [[0.0, 4.0]]])  # [n=2, B=1, L=2]
    y = torch.tensor([[1.0, 0.0]])
    out = critic_mse(q, y)
    # critic 1: ((0)² + (2)²)/2 = 2; critic 2: (1 + 16)/2 = 8.5; mean over critics 5.25
    assert out.loss.item() == pytest.approx(5.25)
    torch.testing.assert_close(out.td_error, torch.tensor([[0.0, 2.0]]))
    weighted = critic_mse(q, y, sample_weight=torch.tensor([0.5]))
    assert weighted.loss.item() == pytest.approx(5.25 * 0.5)
    w = torch.tensor([[0.25, 0.75]])
    # 0.05 · (0.25·0 + 0.75·2) = 0.075 -> floored to 0.1 -> 0.1^0.6
    assert td_priority(out.td_error, w, 0.1, 0.6).item() == pytest.approx(0.1**0.6)
    big = torch.tensor([[0.0, 40.0]])  # 0.05·0.75·40 = 1.5 -> 1.5^0.6
    assert td_priority(big, w, 0.1, 0.6).item() == pytest.approx(1.5**0.6)
    # mean over critics: [0.5, 3] -> w· = 0.125 + 2.25 -> loss −2.375
    assert policy_objective(q, w).item() == pytest.approx(-2.375)


def test_deterministic_symreg_by_hand():
    mean = torch.tensor([[1.0, 2.0], [0.0, -1.0]])
    mean_reflected = torch.tensor([[-1.0, 1.0], [0.5, -1.0]])
    act_sign = torch.tensor([-1.0, 1.0])
    # row 0: K μ = [−1, 2] -> |0| + |−1| = 1 -> 1; row 1: K μ = [0, −1] -> 0.5 -> 0.25; mean 0.625
    assert deterministic_symreg(mean, mean_reflected, act_sign).item() == pytest.approx(0.625)


def _nets(dropout: float = 0.0):
    g = [torch.Generator().manual_seed(3)]
    actor = DeterministicActor(3, 2, 2, (16,), generators=g)
    actor_target = DeterministicActor(3, 2, 2, (16,), generators=[torch.Generator().manual_seed(4)])
    critic = VectorCritics(7, 2, (16,), n=2, dropout=dropout, generators=g)
    critic_target = VectorCritics(
        7, 2, (16,), n=2, dropout=dropout, generators=[torch.Generator().manual_seed(5)]
    )
    return actor, actor_target, critic, critic_target


def _batch(b: int = 6) -> ReplayBatch:
    torch.manual_seed(1)
    w = torch.rand(b, 2)
    return ReplayBatch(
        torch.randn(b, 3),
        torch.rand(b, 2) * 2 - 1,
        torch.randn(b, 2),
        torch.randn(b, 3),
        (torch.rand(b) < 0.3).float(),
        w / w.sum(1, keepdim=True),
    )


def test_composed_critic_loss_uses_target_policy_and_target_critics():
    actor, actor_target, critic, critic_target = _nets()
    batch = _batch()
    out = gpi_pd_critic_loss(
        actor_target, critic, critic_target, batch, 0.99, 0.2, 0.5, torch.Generator().manual_seed(7)
    )
    # By hand, with the same noise draw.
    eps = torch.randn(6, 2, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        a2 = (torch.tanh(actor_target(batch.next_obs, batch.weight)) + (0.2 * eps).clamp(-0.5, 0.5)).clamp(
            -1, 1
        )
        nq = critic_target(torch.cat([batch.next_obs, a2, batch.weight], -1))
        want = []
        for i in range(6):
            k = int(torch.argmin(nq[:, i] @ batch.weight[i]))
            want.append(batch.reward[i] + 0.99 * (1 - batch.done[i]) * nq[k, i])
        q = critic(torch.cat([batch.obs, batch.action, batch.weight], -1))
    torch.testing.assert_close(out.target, torch.stack(want))
    want_loss = 0.5 * sum(((q[k] - out.target) ** 2).mean() for k in range(2))
    assert out.loss.item() == pytest.approx(want_loss.item(), rel=1e-6)
    out.loss.backward()
    assert all(p.grad is None for p in list(actor_target.parameters()) + list(critic_target.parameters()))
    assert all(p.grad is None for p in actor.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in critic.parameters())


def test_actor_loss_reaches_only_the_actor_and_adds_lambda_symreg():
    actor, _, critic, _ = _nets(dropout=0.01)
    batch = _batch()
    obs_sign, act_sign = torch.tensor([1.0, -1.0, 1.0]), torch.tensor([-1.0, 1.0])
    plain = gpi_pd_actor_loss(actor, critic, batch, generator=torch.Generator().manual_seed(0))
    plain.loss.backward()
    assert all(p.grad is None for p in critic.parameters())
    assert all(p.grad is not None for p in actor.parameters())
    with_sym = gpi_pd_actor_loss(
        actor, critic, batch, 0.5, obs_sign, act_sign, torch.Generator().manual_seed(0)
    )
    mu = actor(batch.obs, batch.weight)
    mu_r = actor(batch.obs * obs_sign, batch.weight)
    sym = ((mu_r - mu * act_sign).abs().sum(-1) ** 2).mean()
    assert with_sym.symreg.item() == pytest.approx(sym.item(), rel=1e-5)
    assert with_sym.loss.item() == pytest.approx(plain.loss.item() + 0.5 * sym.item(), rel=1e-5)

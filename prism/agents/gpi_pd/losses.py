"""GPI-PD's TD3-style losses (Alegre et al., AAMAS 2023, appendix; morl-baselines ``GPIPDContinuousAction``).

Pure functions, one equation each, plus two composed from the networks and a replay batch. None of them
steps an optimiser. Facts taken from morl-baselines (not its code):

- target action: ``a' = clamp(tanh μ̄(s', w) + clip(σ ε, −c, c), −1, 1)`` from the *target* policy;
- target value: the *target* critic with the smallest **scalarised** value ``w·Q̄_k(s', a', w)`` is taken
  whole (its full vector), not an elementwise min over objectives: ``y = r + γ(1 − done) Q̄_{k*}``;
- critic loss: the mean over critics of each critic's MSE to y (no importance weights in morl-baselines);
- priority of a transition: ``max(0.05 · w·|Q_1(s, a, w) − y|, min_priority)^α`` (first critic only);
- actor loss: ``−mean_b w·(1/n Σ_k Q_k(s, tanh μ(s, w), w))`` — the *mean* of the critics, not the min.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from prism.agents.gpi_pd.networks import DeterministicActor, VectorCritics
from prism.agents.symmetry import reflect_act, with_reflected
from prism.data.replay import ReplayBatch

PRIORITY_SCALE = 0.05
"""morl-baselines scales the scalarised absolute TD error by 0.05 before flooring it at ``min_priority``."""


class CriticLoss(NamedTuple):
    loss: torch.Tensor  # scalar: Σ over members of each member's loss
    target: torch.Tensor  # [..., B, L] y (no grad)
    td_error: torch.Tensor  # [..., B, L] Q_1 − y (detached): the priorities' source
    member_loss: torch.Tensor  # [...] per member (detached)
    q_mean: torch.Tensor  # [...] per member: mean of Q over critics, batch and objectives


class ActorLoss(NamedTuple):
    loss: torch.Tensor  # scalar: Σ over members of (policy loss + λ·symreg)
    policy_loss: torch.Tensor  # [...] per member (detached)
    symreg: torch.Tensor  # [...] per member (detached; 0 when λ = 0)


# ---- equations --------------------------------------------------------------------------------------


def smoothed_target_action(
    target_mean: torch.Tensor, eps: torch.Tensor, noise_std: float, noise_clip: float
) -> torch.Tensor:
    """TD3 target smoothing: ``a' = clamp(tanh(μ̄) + clip(σ ε, −c, c), −1, 1)``; ``ε ~ N(0, I)`` is passed in.

    ``target_mean`` is the target policy's pre-tanh output. The noise is added *after* the tanh.
    """
    noise = (eps * noise_std).clamp(-noise_clip, noise_clip)
    return (torch.tanh(target_mean) + noise).clamp(-1.0, 1.0)


def td_target(
    reward: torch.Tensor, done: torch.Tensor, next_q: torch.Tensor, weight: torch.Tensor, gamma: float
) -> torch.Tensor:
    """``y = r + γ(1 − done) Q̄_{k*}(s', a', w)`` with ``k* = argmin_k w·Q̄_k(s', a', w)`` per row ``[..., B, L]``.

    ``next_q [..., n, B, L]``; the critic is chosen per row by its scalarised value and its whole vector is
    used (GPI-PD's multi-objective version of clipped double-Q). ``done`` is termination only.
    """
    scalar = (next_q * weight.unsqueeze(-3)).sum(dim=-1)  # [..., n, B]
    k = scalar.argmin(dim=-2, keepdim=True)  # [..., 1, B]
    chosen = next_q.gather(-3, k.unsqueeze(-1).expand(*k.shape, next_q.shape[-1])).squeeze(-3)
    return reward + gamma * (1.0 - done).unsqueeze(-1) * chosen


def critic_mse(
    q: torch.Tensor, target: torch.Tensor, sample_weight: torch.Tensor | None = None
) -> CriticLoss:
    """``(1/n) Σ_k mean_{b,l} ω_b (Q_k − y)²`` per member (``ω`` = PER importance weights, 1 when None).

    ``q [..., n, B, L]``, ``target [..., B, L]``, ``sample_weight [..., B]``. Summed over members.
    """
    target = target.detach()
    sq = (q - target.unsqueeze(-3)).square()  # [..., n, B, L]
    if sample_weight is not None:
        sq = sq * sample_weight.unsqueeze(-1).unsqueeze(-3)
    per_member = sq.mean(dim=(-3, -2, -1))
    td = (q[..., 0, :, :] - target).detach()
    return CriticLoss(per_member.sum(), target, td, per_member.detach(), q.detach().mean(dim=(-3, -2, -1)))


def td_priority(
    td_error: torch.Tensor, weight: torch.Tensor, min_priority: float, alpha: float
) -> torch.Tensor:
    """PER priority ``max(0.05 · w·|δ|, min_priority)^α`` per row ``[..., B]`` (floor before the exponent)."""
    scalar = (td_error.abs() * PRIORITY_SCALE * weight).sum(dim=-1)
    return scalar.clamp_min(min_priority).pow(alpha)


def policy_objective(q: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Per member ``−mean_b w·(1/n Σ_k Q_k)``: ``q [..., n, B, L]`` at the policy's actions -> ``[...]``."""
    return -(q.mean(dim=-3) * weight).sum(dim=-1).mean(dim=-1)


def deterministic_symreg(
    mean: torch.Tensor, mean_reflected: torch.Tensor, act_sign: torch.Tensor
) -> torch.Tensor:
    """SymReg of a deterministic actor: ``mean_b ‖μ(L s, w) − K μ(s, w)‖₁²`` per member ``[...]`` (pre-tanh;
    there is no log-std term). Neither branch is detached."""
    return (mean_reflected - reflect_act(mean, act_sign)).abs().sum(dim=-1).square().mean(dim=-1)


# ---- composed from the networks ------------------------------------------------------------------------


def gpi_pd_critic_loss(
    actor_target: DeterministicActor,
    critic: VectorCritics,
    critic_target: VectorCritics,
    batch: ReplayBatch,
    gamma: float,
    noise_std: float,
    noise_clip: float,
    generator: torch.Generator | None = None,
    sample_weight: torch.Tensor | None = None,
) -> CriticLoss:
    """Critic loss of one update; ``batch.weight`` holds the training weights (not the collection weights).

    The target is computed under ``no_grad`` from the target policy and the target critics; ``generator``
    draws the smoothing noise and the dropout masks."""
    with torch.no_grad():
        target_mean = actor_target(batch.next_obs, batch.weight)
        eps = torch.randn(target_mean.shape, generator=generator, device=target_mean.device)
        next_action = smoothed_target_action(target_mean, eps, noise_std, noise_clip)
        next_q = critic_target(
            torch.cat([batch.next_obs, next_action, batch.weight], dim=-1), generator=generator
        )
        y = td_target(batch.reward, batch.done, next_q, batch.weight, gamma)
    q = critic(torch.cat([batch.obs, batch.action, batch.weight], dim=-1), generator=generator)
    return critic_mse(q, y, sample_weight)


def gpi_pd_actor_loss(
    actor: DeterministicActor,
    critic: VectorCritics,
    batch: ReplayBatch,
    symreg_lambda: float = 0.0,
    obs_sign: torch.Tensor | None = None,
    act_sign: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> ActorLoss:
    """Actor loss ``−mean w·mean_k Q_k(s, tanh μ(s, w), w)`` plus ``λ·SymReg`` when ``symreg_lambda > 0``.

    The critics run with detached parameters: the gradient reaches the actor only. With SymReg the actor runs
    once on ``cat([s, L s])``."""
    obs, weight = batch.obs, batch.weight
    n = obs.shape[-2]
    if symreg_lambda > 0.0:
        if obs_sign is None or act_sign is None:
            raise ValueError("gpi_pd_actor_loss: SymReg needs obs_sign and act_sign")
        mean_all = actor(*with_reflected(obs, weight, obs_sign))
        mean = mean_all[..., :n, :]
        sym = deterministic_symreg(mean, mean_all[..., n:, :], act_sign)
    else:
        mean = actor(obs, weight)
        sym = torch.zeros(obs.shape[:-2], device=obs.device)
    q = critic(torch.cat([obs, torch.tanh(mean), weight], dim=-1), detach_params=True, generator=generator)
    policy = policy_objective(q, weight)
    per_member = policy + symreg_lambda * sym if symreg_lambda > 0.0 else policy
    return ActorLoss(per_member.sum(), policy.detach(), sym.detach())

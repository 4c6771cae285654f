"""CAPQL and SymReg losses as pure functions returning named terms (docs/method.md §6, §7).

Tensor-level functions (``critic_target``, ``critic_loss``, ``actor_loss``, ``symreg_loss``) implement one
equation each; ``capql_critic_loss`` / ``capql_actor_loss`` compose them from the networks and a replay batch.
None of them steps an optimiser or mutates state. Gradient isolation: ``capql_critic_loss`` computes the target
under ``no_grad`` (no gradient reaches the actor or the target critics) and ``capql_actor_loss`` evaluates the
critics with detached parameters (gradient reaches the actor through the actions only).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from prism.agents.networks import VectorCriticEnsemble, sample_tanh_gaussian
from prism.agents.symmetry import reflect_act, with_reflected
from prism.data.replay import ReplayBatch


class CriticLoss(NamedTuple):
    loss: torch.Tensor  # scalar: Σ over members of each member's MSE
    target: torch.Tensor  # [..., B, L] the regression target y (no grad)
    q_mean: torch.Tensor  # [...] per member: mean of Q over critics, batch and objectives (diagnostics)
    member_loss: torch.Tensor  # [...] per member MSE (detached)


class ActorLoss(NamedTuple):
    loss: torch.Tensor  # scalar: Σ over members of (policy loss + λ·symreg)
    policy_loss: torch.Tensor  # [...] per member: mean(α log π − w·min_k Q_k)
    alpha_log_pi: torch.Tensor  # [...] per member: mean α log π(ã|s,w)
    symreg: torch.Tensor  # [...] per member: L_eq (0 when λ = 0)


class SymRegLoss(NamedTuple):
    loss: torch.Tensor  # Σ over members of L_eq = mean_term + log_std_term
    mean_term: torch.Tensor  # [...] mean_b ‖μ(Ls,w) − Kμ(s,w)‖₁²
    log_std_term: torch.Tensor  # [...] mean_b ‖ℓ(Ls,w) − ℓ(s,w)‖₁²


# ---- equations --------------------------------------------------------------------------------------


def critic_target(
    reward: torch.Tensor,
    done: torch.Tensor,
    next_q: torch.Tensor,
    next_log_prob: torch.Tensor,
    gamma: float,
    alpha: float,
) -> torch.Tensor:
    """docs/method.md §6: ``y = r + γ(1 − done)(min_k Q̄_k(s', a', w) − α log π(a'|s', w))`` ``[..., B, L]``.

    ``next_q [..., n, B, L]`` are the target critics at ``a' ~ π(·|s', w)``; the min is elementwise over the
    critics (per objective) and the entropy bonus is subtracted from every component. ``done`` must be the
    *termination* flag: a time-limit truncation is not an absorbing state, so it keeps the bootstrap term.
    """
    soft_next = next_q.min(dim=-3).values - alpha * next_log_prob.unsqueeze(-1)
    return reward + gamma * (1.0 - done).unsqueeze(-1) * soft_next


def critic_loss(q: torch.Tensor, target: torch.Tensor) -> CriticLoss:
    """Mean squared error of every critic ``q [..., n, B, L]`` to the (detached) target ``[..., B, L]``.

    Per member: averaged over critics, batch and objectives (the mean of the per-critic MSEs); summed over
    members.
    """
    target = target.detach()
    per_member = (q - target.unsqueeze(-3)).square().mean(dim=(-3, -2, -1))
    return CriticLoss(per_member.sum(), target, q.detach().mean(dim=(-3, -2, -1)), per_member.detach())


def actor_loss(
    log_prob: torch.Tensor, q: torch.Tensor, weight: torch.Tensor, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """docs/method.md §6: ``mean(α log π(ã|s,w) − w·min_k Q_k(s, ã, w))``; returns per-member (loss, mean α log π).

    ``q [..., n, B, L]`` at the reparameterised actions ã; the min is elementwise over critics, then
    scalarised with the transition's preference ``weight [..., B, L]``; the mean is over the batch.
    """
    alpha_log_pi = alpha * log_prob
    scalarised = (q.min(dim=-3).values * weight).sum(dim=-1)
    return (alpha_log_pi - scalarised).mean(dim=-1), alpha_log_pi.mean(dim=-1)


def symreg_loss(
    mean: torch.Tensor,
    log_std: torch.Tensor,
    mean_reflected: torch.Tensor,
    log_std_reflected: torch.Tensor,
    act_sign: torch.Tensor,
) -> SymRegLoss:
    """docs/method.md §7: ``L_eq = mean_b ‖μ(Ls,w) − K μ(s,w)‖₁² + mean_b ‖ℓ(Ls,w) − ℓ(s,w)‖₁²``.

    ``mean``/``log_std`` are the actor outputs at ``(s, w)``; ``*_reflected`` at ``(L s, w)``. Neither
    branch is detached: both the original and the reflected forward pass receive gradient.
    """
    mean_term = (mean_reflected - reflect_act(mean, act_sign)).abs().sum(dim=-1).square().mean(dim=-1)
    log_std_term = (log_std_reflected - log_std).abs().sum(dim=-1).square().mean(dim=-1)
    return SymRegLoss((mean_term + log_std_term).sum(), mean_term, log_std_term)


# ---- composed from the networks ------------------------------------------------------------------------


def capql_critic_loss(
    actor: nn.Module,
    critic: VectorCriticEnsemble,
    critic_target_net: VectorCriticEnsemble,
    batch: ReplayBatch,
    gamma: float,
    alpha: float,
    generator: torch.Generator | None = None,
    log_prob_form: str = "exact",
) -> CriticLoss:
    """Critic loss of one update: target from the current actor and the Polyak target critics.

    ``batch`` fields are ``[S, B, ...]`` (or ``[B, ...]`` for one member); ``generator`` draws a' 's noise;
    ``log_prob_form``: :func:`~prism.agents.networks.sample_tanh_gaussian`'s (``agent.tanh_log_prob``)."""
    with torch.no_grad():
        next_mean, next_log_std = actor(batch.next_obs, batch.weight)
        next_action, next_log_prob = sample_tanh_gaussian(next_mean, next_log_std, generator, log_prob_form)
        next_q = critic_target_net(torch.cat([batch.next_obs, next_action, batch.weight], dim=-1))
        y = critic_target(batch.reward, batch.done, next_q, next_log_prob, gamma, alpha)
    q = critic(torch.cat([batch.obs, batch.action, batch.weight], dim=-1))
    return critic_loss(q, y)


def capql_actor_loss(
    actor: nn.Module,
    critic: VectorCriticEnsemble,
    batch: ReplayBatch,
    alpha: float,
    symreg_lambda: float = 0.0,
    obs_sign: torch.Tensor | None = None,
    act_sign: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    log_prob_form: str = "exact",
) -> ActorLoss:
    """Actor loss of one update, plus ``λ·L_eq`` when ``symreg_lambda > 0``.

    With SymReg on, the actor runs once on ``cat([s, L s])`` (:func:`~prism.agents.symmetry.with_reflected`)
    so both branches share one forward pass. ``batch`` fields are ``[S, B, ...]`` or ``[B, ...]``; ``generator`` draws ã's noise.
    """
    obs, weight = batch.obs, batch.weight
    n = obs.shape[-2]
    if symreg_lambda > 0.0:
        if obs_sign is None or act_sign is None:
            raise ValueError("capql_actor_loss: SymReg needs obs_sign and act_sign")
        mean_all, log_std_all = actor(*with_reflected(obs, weight, obs_sign))
        mean, log_std = mean_all[..., :n, :], log_std_all[..., :n, :]
        sym = symreg_loss(mean, log_std, mean_all[..., n:, :], log_std_all[..., n:, :], act_sign)
        sym_per_member = sym.mean_term + sym.log_std_term
    else:
        mean, log_std = actor(obs, weight)
        sym_per_member = torch.zeros(obs.shape[:-2], device=obs.device)
    action, log_prob = sample_tanh_gaussian(mean, log_std, generator, log_prob_form)
    q = critic(torch.cat([obs, action, weight], dim=-1), detach_params=True)
    policy, alpha_log_pi = actor_loss(log_prob, q, weight, alpha)
    per_member = policy + symreg_lambda * sym_per_member if symreg_lambda > 0.0 else policy
    return ActorLoss(per_member.sum(), policy.detach(), alpha_log_pi.detach(), sym_per_member.detach())

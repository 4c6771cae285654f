"""SymReg (docs/method.md §7): zero on orbit-averaged policies, positive on random ones, and it trains
equivariance in."""

from __future__ import annotations

import numpy as np
import torch

from prism.agents.losses import capql_actor_loss, symreg_loss
from prism.agents.networks import GaussianActor, VectorCriticEnsemble
from prism.agents.preferences import cone_weights
from prism.agents.symmetry import (
    OrbitAveragedActor,
    equivariance_error,
    reflect_obs,
    reflection_from_spec,
)
from prism.data.replay import ReplayBatch
from prism.envs import TOY_SPEC, get_env_spec


def _toy_states(n: int = 512, seed: int = 0) -> torch.Tensor:
    env = TOY_SPEC.make()
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    states = []
    while len(states) < n:
        states.append(obs)
        obs, _, term, trunc, _ = env.step(rng.uniform(-1, 1, 2).astype(np.float32))
        if term or trunc:
            obs, _ = env.reset()
    return torch.as_tensor(np.stack(states))


def _sym_of(actor, obs, weight, act_sign, obs_sign):
    n = obs.shape[0]
    mean, log_std = actor(torch.cat([obs, reflect_obs(obs, obs_sign)]), torch.cat([weight, weight]))
    return symreg_loss(mean[:n], log_std[:n], mean[n:], log_std[n:], act_sign)


def test_reflection_signs_come_from_spec():
    spec = get_env_spec("mo-hopper-v5")
    obs_sign, act_sign = reflection_from_spec(spec)
    assert (obs_sign == -1).nonzero().flatten().tolist() == [2, 3, 4, 8, 9, 10]
    assert act_sign.tolist() == [-1.0, -1.0, -1.0]


def test_symreg_zero_for_orbit_averaged_and_positive_for_random_policy():
    torch.manual_seed(0)
    obs_sign, act_sign = reflection_from_spec(TOY_SPEC)
    obs = _toy_states(256)
    weight = cone_weights(256, 2)
    base = GaussianActor(6, 2, 2, [64, 64])
    exact = OrbitAveragedActor(base, obs_sign, act_sign)
    with torch.no_grad():
        sym_exact = _sym_of(exact, obs, weight, act_sign, obs_sign)
        sym_random = _sym_of(base, obs, weight, act_sign, obs_sign)
    assert sym_exact.loss.item() <= 1e-6
    assert sym_random.loss.item() > 1e-3
    assert sym_random.mean_term.item() > 0 and sym_random.log_std_term.item() > 0


def test_symreg_gradient_flows_through_both_branches():
    mean = torch.randn(8, 2, requires_grad=True)
    log_std = torch.randn(8, 2, requires_grad=True)
    mean_r = torch.randn(8, 2, requires_grad=True)
    log_std_r = torch.randn(8, 2, requires_grad=True)
    symreg_loss(mean, log_std, mean_r, log_std_r, -torch.ones(2)).loss.backward()
    for t in (mean, log_std, mean_r, log_std_r):
        assert t.grad is not None and t.grad.abs().sum() > 0


def test_symreg_value_matches_definition():
    mean = torch.tensor([[1.0, 2.0]])
    mean_r = torch.tensor([[-1.5, -2.0]])  # K mean = [-1, -2]; diff = [-0.5, 0] -> L1 0.5 -> sq 0.25
    log_std = torch.tensor([[0.0, 0.0]])
    log_std_r = torch.tensor([[1.0, -1.0]])  # L1 2 -> sq 4
    out = symreg_loss(mean, log_std, mean_r, log_std_r, -torch.ones(2))
    assert out.mean_term.item() == 0.25 and out.log_std_term.item() == 4.0 and out.loss.item() == 4.25


def test_symreg_training_cuts_equivariance_error_tenfold():
    torch.manual_seed(0)
    obs_sign, act_sign = reflection_from_spec(TOY_SPEC)
    obs = _toy_states(512)
    weight = cone_weights(512, 2, generator=torch.Generator().manual_seed(0))
    actor = GaussianActor(6, 2, 2, [64, 64])
    mean_fn = lambda o, w: actor(o, w)[0]  # noqa: E731
    with torch.no_grad():
        before = equivariance_error(mean_fn, obs, weight, obs_sign, act_sign).item()
    opt = torch.optim.Adam(actor.parameters(), lr=1e-3)
    for _ in range(300):
        loss = _sym_of(actor, obs, weight, act_sign, obs_sign).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        after = equivariance_error(mean_fn, obs, weight, obs_sign, act_sign).item()
    assert before > 0.05
    assert after <= before / 10, (before, after)


def test_capql_actor_loss_adds_lambda_times_symreg():
    torch.manual_seed(0)
    obs_sign, act_sign = reflection_from_spec(TOY_SPEC)
    actor = GaussianActor(6, 2, 2, [32])
    critic = VectorCriticEnsemble(10, 2, [32])
    b = 16
    batch = ReplayBatch(
        _toy_states(b),
        torch.zeros(b, 2),
        torch.zeros(b, 2),
        torch.zeros(b, 6),
        torch.zeros(b),
        cone_weights(b, 2),
    )
    torch.manual_seed(1)
    with_reg = capql_actor_loss(actor, critic, batch, 0.2, 3.0, obs_sign, act_sign)
    torch.manual_seed(1)
    without = capql_actor_loss(actor, critic, batch, 0.2, 0.0)
    # L_eq by hand from two separate forward passes (not the fused cat([s, L s]) pass of capql_actor_loss),
    # with L and K written out from the toy spec's index lists.
    obs_l = batch.obs.clone()
    obs_l[:, list(TOY_SPEC.symmetric_obs)] *= -1
    with torch.no_grad():
        mean, log_std = actor(batch.obs, batch.weight)
        mean_l, log_std_l = actor(obs_l, batch.weight)
    k_mean = mean.clone()
    k_mean[:, list(TOY_SPEC.symmetric_act)] *= -1
    l_eq = ((mean_l - k_mean).abs().sum(1) ** 2).mean() + ((log_std_l - log_std).abs().sum(1) ** 2).mean()
    assert l_eq.item() > 1e-3
    torch.testing.assert_close(with_reg.symreg, l_eq)
    torch.testing.assert_close(with_reg.policy_loss, without.policy_loss)
    torch.testing.assert_close(with_reg.loss.detach(), without.loss.detach() + 3.0 * l_eq)
    assert without.symreg.item() == 0

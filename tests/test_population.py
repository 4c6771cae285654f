"""Population runs: S members in one set of stacked tensors behave exactly like S solo agents."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from prism.agents import losses as losses_module
from prism.agents.capql import CAPQLModule, capql_update
from prism.agents.config import CAPQLConfig
from prism.data.replay import ReplayBatch, ReplayBuffer
from prism.envs import make_env
from prism.envs.registry import TOY_SPEC

SMALL = dict(actor_hidden=[32, 32], critic_hidden=[32, 32], batch_size=16, buffer_size=500)
SEEDS = (3, 7)


def _agent(seeds, **overrides) -> CAPQLModule:
    config = CAPQLConfig(**{**SMALL, **overrides})
    return CAPQLModule(config, TOY_SPEC, lambda member: make_env(TOY_SPEC), seeds=seeds)


def _random_batch(members: int, batch: int, generator: torch.Generator) -> ReplayBatch:
    o, a, n_obj = TOY_SPEC.obs_dim, TOY_SPEC.act_dim, TOY_SPEC.n_objectives
    weight = torch.rand(members, batch, n_obj, generator=generator)
    return ReplayBatch(
        obs=torch.randn(members, batch, o, generator=generator),
        action=torch.rand(members, batch, a, generator=generator) * 2 - 1,
        reward=torch.randn(members, batch, n_obj, generator=generator),
        next_obs=torch.randn(members, batch, o, generator=generator),
        done=(torch.rand(members, batch, generator=generator) < 0.2).float(),
        weight=weight / weight.sum(-1, keepdim=True),
    )


def _slice(batch: ReplayBatch, member: int) -> ReplayBatch:
    return ReplayBatch(*(field[member : member + 1] for field in batch))


class _ScriptedNoise:
    """Replaces the policy-noise draw: hands out pre-drawn ε tensors (sliced to one member for a solo agent)."""

    def __init__(self, noises: list[torch.Tensor], member: int | None):
        self.noises = iter(noises)
        self.member = member

    def __call__(self, mean, log_std, generator=None, log_prob_form="exact"):
        assert log_prob_form == "exact"  # the scripted log-density below is the exact form
        eps = next(self.noises)
        if self.member is not None:
            eps = eps[self.member : self.member + 1]
        u = mean + log_std.exp() * eps
        log_normal = -0.5 * eps.square() - log_std - 0.5 * np.log(2 * np.pi)
        log_det = 2.0 * (np.log(2.0) - u - torch.nn.functional.softplus(-2.0 * u))
        return torch.tanh(u), (log_normal - log_det).sum(dim=-1)


def _member_params(agent: CAPQLModule, member: int) -> dict[str, torch.Tensor]:
    """Every parameter / target tensor of one member (slices of the stacked tensors)."""
    n = agent.config.n_critics
    out = {}
    for name, tensor in itertools.chain(agent.actor.named_parameters(), agent.actor.named_buffers()):
        out[f"actor.{name}"] = tensor[member]
    for prefix, net in (("critic", agent.critic), ("critic_target", agent.critic_target)):
        for name, tensor in net.named_parameters():
            out[f"{prefix}.{name}"] = tensor[member * n : (member + 1) * n]
    return out


@pytest.mark.parametrize("mode", ["regularise", "exact"])
def test_population_update_equals_solo_updates(mode, monkeypatch):
    population = _agent(SEEDS, symmetry_mode=mode, symreg_lambda=0.1)
    solos = [_agent((seed,), symmetry_mode=mode, symreg_lambda=0.1) for seed in SEEDS]
    # Each member starts from exactly the weights of the solo run with its seed (per-member init streams).
    for m, solo in enumerate(solos):
        for key, value in _member_params(population, m).items():
            torch.testing.assert_close(value, _member_params(solo, 0)[key], rtol=0, atol=0)

    draws = torch.Generator().manual_seed(0)
    steps = 3  # several updates, so Adam's moments and the Polyak targets are exercised too
    batches = [_random_batch(2, 16, draws) for _ in range(steps)]
    noises = [torch.randn(2, 16, TOY_SPEC.act_dim, generator=draws) for _ in range(2 * steps)]

    def run(agent: CAPQLModule, member: int | None) -> list[torch.Tensor]:
        monkeypatch.setattr(losses_module, "sample_tanh_gaussian", _ScriptedNoise(noises, member))
        optimizers = agent.configure_optimizers()
        polyak = (list(agent.critic_target.parameters()), list(agent.critic.parameters()))
        terms = []
        for batch in batches:
            batch = batch if member is None else _slice(batch, member)
            terms.append(
                capql_update(
                    agent.nets, optimizers, batch, agent.hyper, agent.obs_sign, agent.act_sign, None, polyak
                )
            )
        return terms

    before = {k: v.detach().clone() for k, v in _member_params(population, 0).items()}
    population_terms = run(population, None)
    for m, solo in enumerate(solos):
        solo_terms = run(solo, m)
        for pop_t, solo_t in zip(population_terms, solo_terms):
            torch.testing.assert_close(pop_t[m], solo_t[0], rtol=0, atol=1e-5)
        solo_params = _member_params(solo, 0)
        for key, value in _member_params(population, m).items():
            assert (value - solo_params[key]).abs().max().item() <= 1e-5, key
    # the updates did move every member's weights (the comparison above is not between untouched tensors)
    after = _member_params(population, 0)
    assert all(not torch.equal(before[k], after[k]) for k in before if "weights" in k)


def test_member_gradients_equal_solo_gradients(monkeypatch):
    """d(Σ_s loss_s)/dθ_s == d loss_s/dθ_s: each member's gradient is exactly its solo gradient (a mean over
    members would halve it — which Adam's scale invariance would hide from a parameter comparison)."""
    population, solo = _agent(SEEDS), _agent(SEEDS[:1])
    draws = torch.Generator().manual_seed(1)
    batch = _random_batch(2, 16, draws)
    noise = torch.randn(2, 16, TOY_SPEC.act_dim, generator=draws)

    def grads(agent: CAPQLModule, b: ReplayBatch, member: int | None) -> list[torch.Tensor]:
        monkeypatch.setattr(losses_module, "sample_tanh_gaussian", _ScriptedNoise([noise, noise], member))
        agent.zero_grad()
        critic = losses_module.capql_critic_loss(agent.actor, agent.critic, agent.critic_target, b, 0.99, 0.2)
        actor = losses_module.capql_actor_loss(
            agent.actor, agent.critic, b, 0.2, 0.1, agent.obs_sign, agent.act_sign
        )
        (critic.loss + actor.loss).backward()
        return [agent.critic.net.weights[0].grad.clone(), agent.actor.net.weights[0].grad.clone()]

    n = population.config.n_critics
    pop_critic, pop_actor = grads(population, batch, None)
    solo_critic, solo_actor = grads(solo, _slice(batch, 0), 0)
    torch.testing.assert_close(pop_critic[:n], solo_critic, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(pop_actor[:1], solo_actor, rtol=1e-5, atol=1e-7)
    assert solo_critic.abs().max() > 1e-4 and solo_actor.abs().max() > 1e-6


def test_replay_rings_and_streams_are_per_member():
    buffer = ReplayBuffer(4, 1, 1, 1, members=2)
    rows = np.arange(6 * buffer.width, dtype=np.float32).reshape(6, buffer.width)
    buffer.add_rows(np.array([0, 0, 1, 0, 0, 0]), rows)  # member 0 wraps around within one call
    assert buffer.sizes.tolist() == [4, 1] and buffer.positions.tolist() == [1, 1]
    # sequential writes would leave rows 5, 3, 4 ... : the ring holds the newest 4 of member 0's 5 rows
    assert buffer.storage[0, :, 0].tolist() == [rows[5, 0], rows[1, 0], rows[3, 0], rows[4, 0]]
    assert buffer.storage[1, 0, 0].item() == rows[2, 0]
    # member s's indices depend on its own generator only
    g = [torch.Generator().manual_seed(11), torch.Generator().manual_seed(12)]
    alone = ReplayBuffer(4, 1, 1, 1, members=1)
    alone.add_rows(np.zeros(4, dtype=np.int64), rows[[5, 1, 3, 4]])
    expected = alone.sample(8, torch.Generator().manual_seed(11))
    together = buffer.sample_members(8, g)
    torch.testing.assert_close(together.obs[0], expected.obs)

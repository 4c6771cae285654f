"""GPI-PD's weights against morl-baselines' semantics (issue 12): updates double their batch with the iteration's
weight set M (not only the CCS support), GPI scores every candidate action under every support critic, and model
rollouts start from ``dynamics_rollout_batch_size`` states drawn with replacement."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch
from toy_learning import fit_to_end

from prism.agents.gpi_pd.agent import GPIPDAgent
from prism.agents.gpi_pd.config import GPIPDConfig
from prism.envs import TOY_SPEC, make_env

E1, E2, MID = np.array([1.0, 0.0]), np.array([0.0, 1.0]), np.array([0.5, 0.5])


@pytest.fixture(scope="module")
def trained_agent() -> GPIPDAgent:
    """A tiny agent after 60 env steps (updates from step 20), so replay, PER and the networks are live."""
    L.seed_everything(0)
    config = GPIPDConfig(
        learning_starts=20,
        batch_size=16,
        buffer_size=500,
        net_arch=[16, 16],
        gradient_updates=1,
        timesteps_per_iter=10_000,
        dynamics_net_arch=[16],
        dynamics_rollout_starts=10_000,
    )
    agent = GPIPDAgent(config, TOY_SPEC, lambda _member: make_env(TOY_SPEC), seeds=[0], target_env_steps=60)
    fit_to_end(agent)
    return agent


def test_m_has_no_repeats_and_doubles_the_batch_even_while_the_ccs_support_is_one_weight(trained_agent):
    agent = trained_agent
    agent._set_iteration_weights([E1, E2, E1.copy(), MID])
    assert np.stack(agent._iteration_weights).tolist() == [E1.tolist(), E2.tolist(), MID.tolist()]
    agent._support_t = torch.tensor(E1[None], dtype=torch.float32)  # the CCS support: one weight so far
    agent._weight = E1
    batch = agent.sample_batch()
    n = agent.config.batch_size
    assert batch.weight.shape == (2 * n, 2)
    torch.testing.assert_close(batch.obs[:n], batch.obs[n:], rtol=0, atol=0)
    assert (batch.weight[:n] == torch.tensor(E1, dtype=torch.float32)).all()
    drawn = {tuple(row) for row in batch.weight[n:].tolist()}
    assert drawn <= {tuple(E1), tuple(E2), tuple(MID)} and len(drawn) >= 2
    agent._set_iteration_weights([E2, E2])  # M of one weight: no doubling
    assert agent.sample_batch().weight.shape == (n, 2)


def test_gpi_action_is_the_best_pair_of_candidate_action_and_support_critic(trained_agent):
    agent = trained_agent
    support = torch.tensor(np.stack([E1, E2, MID, [0.8, 0.2]]), dtype=torch.float32)
    agent._support_t = support
    g = torch.Generator().manual_seed(3)
    off_diagonal = 0
    agent.critic.eval()
    for _ in range(30):
        obs = torch.randn(1, TOY_SPEC.obs_dim, generator=g)
        w = torch.rand(1, 2, generator=g)
        w = w / w.sum()
        best, best_pair = -np.inf, None
        with torch.no_grad():
            for i, w_i in enumerate(support):  # brute force: every (critic weight, candidate action) pair
                for j, w_j in enumerate(support):
                    a_j = torch.tanh(agent.actor(obs, w_j[None]))
                    q = agent.critic(torch.cat([obs, a_j, w_i[None]], dim=-1))[0, 0]
                    if float(q @ w[0]) > best:
                        best, best_pair = float(q @ w[0]), (i, j, a_j)
        i, j, action = best_pair
        off_diagonal += i != j
        torch.testing.assert_close(agent.gpi_action(obs, w), action)
    agent.critic.train()
    assert off_diagonal > 0  # the cases a diagonal-only GPI (Q_i at its own action) would get wrong


def test_model_rollouts_start_from_the_configured_number_of_states(trained_agent):
    agent = trained_agent
    agent.config.dynamics_rollout_len = 1
    agent.config.dynamics_rollout_batch_size = 300  # more than the 60 real transitions stored
    agent.config.dynamics_min_uncertainty = 1e9
    agent._ensure_dyna()
    agent.dynamics.fit(agent.buffer.all(0), agent._dyna_generator)
    before = len(agent.model_buffer)
    agent._rollout_model()
    assert len(agent.buffer) == 60 and len(agent.model_buffer) - before == 300

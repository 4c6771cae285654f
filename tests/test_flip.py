"""The flip diagnostic of the evaluations (issue 60): on mo-halfcheetah-v5, each episode's mean cos(torso angle) is
recorded, and ``flipped_fraction`` (eval.csv) is the share of episodes whose mean is below 0 (on the back)."""

from __future__ import annotations

import numpy as np
import torch

from prism.envs import get_env_spec
from prism.evaluation.records import eval_row
from prism.evaluation.rollout import evaluate_policy, pair_seeds


def _policy(obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    # A fixed, state-dependent policy: enough to move the torso angle around.
    return torch.tanh(obs[:, :6] * 3.0 - 0.5)


def test_the_upright_measure_is_each_episodes_mean_cos_of_the_torso_angle():
    spec = get_env_spec("mo-halfcheetah-v5")
    assert spec.pitch_obs == 1
    weights = np.array([[0.5, 0.5], [1.0, 0.0]])
    result = evaluate_policy(_policy, spec, weights=weights, episodes=2, seed=7, num_workers=0)
    assert result.upright.shape == (2, 2)
    # Brute force: the same four episodes, one at a time, through the plain env.
    seeds = pair_seeds(7, 4)
    for k, seed in enumerate(seeds):
        env = spec.make()
        obs, _ = env.reset(seed=int(seed))
        cosines, done = [], False
        while not done:
            cosines.append(np.cos(obs[1]))
            action = _policy(torch.as_tensor(obs[None], dtype=torch.float32), None)[0].numpy()
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
        env.close()
        assert np.isclose(result.upright.reshape(-1)[k], np.mean(cosines), atol=1e-6), k
    row = eval_row(result, spec.objective_names, 1000)
    assert row["flipped_fraction"] == float((result.upright < 0).mean())


def test_an_env_without_a_pitch_index_has_no_flip_column():
    spec = get_env_spec("mo-swimmer-v5")
    assert spec.pitch_obs is None
    result = evaluate_policy(lambda o, w: torch.zeros(o.shape[0], 2), spec, weights=np.array([[1.0, 0.0]]),
                             episodes=1, seed=1, num_workers=0)  # fmt: skip
    assert result.upright is None and "flipped_fraction" not in eval_row(result, spec.objective_names, 0)

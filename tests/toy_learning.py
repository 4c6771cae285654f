"""Shared measurements of the learning tests on the toy env: discounted returns of a policy, per-weight
returns of an agent's deterministic policy, the EUM over a few weights inside the training cone, and a
Lightning fit to the agent's ``target_env_steps``."""

from __future__ import annotations

from collections.abc import Callable

import lightning as L
import numpy as np
import torch

from prism.envs import TOY_SPEC

GAMMA = 0.99
WEIGHTS = np.array([[0.3, 0.7], [0.5, 0.5], [0.7, 0.3]])  # inside the training cone
EPISODES = 20


def discounted_return(policy: Callable[[np.ndarray], np.ndarray], seed: int = 100) -> np.ndarray:
    """Mean discounted vector return ``[L]`` of ``policy`` over EPISODES toy episodes (resets seeded)."""
    env = TOY_SPEC.make()
    returns = []
    for episode in range(EPISODES):
        obs, _ = env.reset(seed=seed + episode)
        total, discount = np.zeros(2), 1.0
        while True:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            total += discount * reward
            discount *= GAMMA
            if terminated or truncated:
                break
        returns.append(total)
    return np.mean(returns, axis=0)


def per_weight_returns(agent) -> np.ndarray:
    """Discounted returns ``[len(WEIGHTS), L]`` of ``agent.act`` (deterministic) at each weight."""
    out = []
    for w in WEIGHTS:
        weight = torch.as_tensor(w, dtype=torch.float32).unsqueeze(0)
        act = lambda obs, weight=weight: agent.act(torch.as_tensor(obs).unsqueeze(0), weight)[0].numpy()  # noqa: E731
        out.append(discounted_return(act))
    return np.stack(out)


def random_policy_return(seed: int = 0) -> np.ndarray:
    """Discounted return ``[L]`` of the uniform random policy."""
    rng = np.random.default_rng(seed)
    return discounted_return(lambda obs: rng.uniform(-1, 1, 2).astype(np.float32))


def eum(returns: np.ndarray) -> float:
    """Expected utility over WEIGHTS of the best policy in ``returns [n_policies, L]`` (docs/method.md §9)."""
    return float(np.mean(np.max(WEIGHTS @ np.atleast_2d(returns).T, axis=1)))


def fit_to_end(agent) -> None:
    """Train ``agent`` to its ``target_env_steps`` with a bare CPU Trainer."""
    L.Trainer(
        max_epochs=-1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
        devices=1,
    ).fit(agent)

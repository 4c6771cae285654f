"""Diagnostic figures of the PRISM loop (TensorBoard images; never part of training)."""

from __future__ import annotations

import torch

from prism.data.collect import run_episode, uniform_random_policy
from prism.envs import EnvSpec, make_env
from prism.reward.model import RewardModel


def shaped_vs_true_figure(model: RewardModel, spec: EnvSpec, sparse_channel: int, policy=None, seed: int = 0):
    """Plot the model's per-step prediction against the true sparse reward over one episode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    env = make_env(spec, sparse_channel=sparse_channel, p_rel=0.0, seed=seed)
    if policy is None:
        policy = uniform_random_policy(env.action_space, seed=seed)
    episode = run_episode(env, policy, seed=seed)
    features = model.features(
        episode.obs, episode.action, episode.true_reward, sparse_channel, episode.next_obs
    )
    true_l = episode.true_reward[:, sparse_channel]
    with torch.no_grad():
        predicted = model.predict(features).cpu().numpy()
    figure, axis = plt.subplots(figsize=(7, 3.2))
    axis.plot(true_l, label="true", linewidth=1.2)
    axis.plot(predicted, label="predicted", linewidth=1.2, alpha=0.8)
    axis.set_xlabel("step")
    axis.set_ylabel(f"reward channel {sparse_channel} ({spec.objective_names[sparse_channel]})")
    axis.legend(loc="best")
    figure.tight_layout()
    plt.close(figure)
    return figure

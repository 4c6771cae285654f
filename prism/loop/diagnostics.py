"""Diagnostic figures of the PRISM loop (TensorBoard images; never part of training)."""

from __future__ import annotations

import numpy as np
import torch

from prism.data.collect import uniform_random_policy
from prism.data.features import build_features
from prism.envs import EnvSpec, make_env


def shaped_vs_true_figure(model, spec: EnvSpec, sparse_channel: int, policy=None, seed: int = 0):
    """Plot the model's per-step prediction against the true sparse reward over one episode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    env = make_env(spec, sparse_channel=sparse_channel, p_rel=0.0, seed=seed)
    if policy is None:
        policy = uniform_random_policy(env.action_space, seed=seed)
    obs, _ = env.reset(seed=seed)
    obs_l, act_l, rew_l, true_l = [], [], [], []
    done = False
    while not done:
        action = np.asarray(policy(obs), dtype=np.float32)
        next_obs, _, terminated, truncated, info = env.step(action)
        obs_l.append(obs)
        act_l.append(action)
        rew_l.append(info["true_reward"])
        true_l.append(float(info["true_reward"][sparse_channel]))
        obs, done = next_obs, terminated or truncated
    features = build_features(
        np.asarray(obs_l), np.asarray(act_l), np.asarray(rew_l), sparse_channel, model.use_dense_features
    )
    with torch.no_grad():
        predicted = model.predict(features).cpu().numpy()
    figure, axis = plt.subplots(figsize=(7, 3.2))
    axis.plot(true_l, label="true", linewidth=1.2)
    axis.plot(predicted, label="ReSymNet", linewidth=1.2, alpha=0.8)
    axis.set_xlabel("step")
    axis.set_ylabel(f"reward channel {sparse_channel} ({spec.objective_names[sparse_channel]})")
    axis.legend(loc="best")
    figure.tight_layout()
    plt.close(figure)
    return figure

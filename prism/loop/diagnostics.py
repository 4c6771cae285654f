"""Diagnostic figures of the PRISM loop (TensorBoard images; never part of training)."""

from __future__ import annotations

import numpy as np
import torch

from prism.data.collect import run_episode, uniform_random_policy
from prism.envs import EnvSpec, make_env
from prism.reward.conservation import conserve_one_segment
from prism.reward.model import RewardModel


def shaped_vs_true_figure(
    model: RewardModel, spec: EnvSpec, sparse_channel: int, policy=None, seed: int = 0, caption: str = ""
):
    """Plot the model's per-step prediction against the true sparse reward over one episode of ``policy``
    (default: uniform random actions) from reset seed ``seed``. The title is ``caption`` (which model and
    policy, the caller knows) over the episode's own line: its seed, length, true and predicted sums."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    env = make_env(spec, sparse_channel=sparse_channel, p_rel=0.0, seed=seed)
    if policy is None:
        policy = uniform_random_policy(env.action_space, seed=seed)
    episode = run_episode(env, policy, seed=seed)
    flag = {}
    if model.inputs.terminal:
        terminated = np.zeros(len(episode.obs), dtype=bool)
        terminated[-1] = episode.terminated  # the env's termination flag of each step (never truncation)
        flag["terminated"] = terminated
    features = model.features(
        episode.obs, episode.action, episode.true_reward, sparse_channel, episode.next_obs, **flag
    )
    true_l = episode.true_reward[:, sparse_channel]
    with torch.no_grad():
        predicted = model.predict(features).cpu().numpy()
    if getattr(model, "conserves_return", False):
        # What the agent is given: the episode (one segment at p_rel = 0) shifted to sum to its return.
        predicted = conserve_one_segment(predicted, float(episode.emitted[-1, sparse_channel]))
    figure, axis = plt.subplots(figsize=(7, 3.6))
    episode_line = (
        f"one episode of its own (reset seed {seed}), {len(true_l)} steps: "
        f"true sum {float(true_l.sum()):.4g}, predicted sum {float(predicted.sum()):.4g}"
    )
    axis.set_title("\n".join(line for line in (caption, episode_line) if line), fontsize=9)
    axis.plot(true_l, label="true", linewidth=1.2)
    axis.plot(predicted, label="predicted", linewidth=1.2, alpha=0.8)
    axis.set_xlabel("step")
    axis.set_ylabel(f"reward channel {sparse_channel} ({spec.objective_names[sparse_channel]})")
    axis.legend(loc="best")
    figure.tight_layout()
    plt.close(figure)
    return figure

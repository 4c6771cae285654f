"""Building the envs a run needs from a spec."""

from __future__ import annotations

import gymnasium as gym

from prism.envs.spec import EnvSpec
from prism.envs.wrappers import SparseRewardWrapper, release_probabilities


def make_env(
    spec: EnvSpec,
    *,
    sparse_channel: int | None = None,
    p_rel: float = 0.0,
    seed: int | None = None,
) -> gym.Env:
    """The env the learner sees.

    The env acts in [−1, 1] (:meth:`EnvSpec.make` rescales other bounded Box action spaces).
    ``sparse_channel=None`` gives the plain dense env (oracle, evaluation). Otherwise the env is wrapped in
    :class:`SparseRewardWrapper` with every channel dense except ``sparse_channel``, released with
    probability ``p_rel`` per step and always at episode end; ``seed`` seeds the release draws.
    """
    env = spec.make()
    if sparse_channel is None:
        return env
    probs = release_probabilities(spec.n_objectives, sparse_channel, p_rel)
    return SparseRewardWrapper(env, probs, seed=seed)

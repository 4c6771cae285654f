"""``prism uniform-credit``: how much per-step information uniform R/T redistribution carries, per env
(docs/results/README.md and docs/results/table1-study quote it).

The uniform arm pays every step of an episode its return spread evenly, R/T. Pooled over the steps of many
episodes, the Pearson correlation of that reward with the hidden per-step reward r_t is the correlation ratio
η of r_t grouped by episode: η² is the share of r_t's variance (over all steps) that lies between the
episodes' means, and corr(r_t, its episode's mean) = η for any episode lengths (the covariance of r_t with
its episode mean is the variance of that mean). The tool prints both, computed independently, on episodes
of a uniform random policy: the store every first reward fit (cycle 1) learns from, so the numbers sit beside
that fit's validation Pearson (``summary.json`` ``reward_fits``).

    prism uniform-credit                                   # the four MuJoCo tasks, the report's numbers
    prism uniform-credit --envs mo-swimmer-v5 --episodes 20

Where episodes end when the robot falls (hopper, walker2d), R/T carries survival: short episodes pay less
per step. Where every episode lasts 1000 steps (halfcheetah, swimmer), almost all of r_t's variance lies
within episodes, and R/T is nearly the same number at every step of every episode.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from prism.envs.spec import EnvSpec

#: env id -> random episodes drawn (short episodes on hopper and walker2d, 1000 steps on the other two)
DEFAULT_EPISODES = {"mo-hopper-v5": 300, "mo-walker2d-v5": 300, "mo-halfcheetah-v5": 60, "mo-swimmer-v5": 60}


@dataclass(frozen=True)
class RandomEpisode:
    """One uniform-random episode through the sparse wrapper, as a run's first collection (cycle 1) sees it."""

    rewards: np.ndarray
    """``[T]`` the hidden channel's true per-step reward r_t."""
    released: np.ndarray
    """``[T]`` bool: the wrapper released the hidden channel at step t (it closes a segment; always at the
    last step)."""
    terminated: bool
    """The env ended the episode (a fall: hopper's and walker2d's unhealthy state), not the time limit."""

    def segments(self) -> list[np.ndarray]:
        """r_t cut after each release: one array per segment, the whole episode when ``p_rel`` = 0."""
        return np.split(self.rewards, np.flatnonzero(self.released[:-1]) + 1)


def collect_random_episodes(
    spec: EnvSpec, episodes: int, seed: int, sparse_channel: int | None = None, p_rel: float = 0.0
) -> list[RandomEpisode]:
    """``episodes`` episodes of a uniform random policy on ``spec``'s env behind the sparse wrapper, hiding
    ``sparse_channel`` (default: the spec's) released with probability ``p_rel`` per step and at the end."""
    from prism.envs.factory import make_env

    channel = spec.sparse_channel if sparse_channel is None else sparse_channel
    env = make_env(spec, sparse_channel=channel, p_rel=p_rel, seed=seed)
    actions = np.random.default_rng(seed)
    out = []
    for episode in range(episodes):
        env.reset(seed=seed * 100_000 + episode)
        rewards, released, done, terminated = [], [], False, False
        while not done:
            action = actions.uniform(-1.0, 1.0, env.action_space.shape).astype(np.float32)
            _, _, terminated, truncated, info = env.step(action)
            rewards.append(float(info["true_reward"][channel]))
            released.append(bool(info["released"][channel]))
            done = terminated or truncated  # either ends the episode, and the wrapper releases R there
        out.append(RandomEpisode(np.asarray(rewards), np.asarray(released), bool(terminated)))
    env.close()
    return out


def random_episode_rewards(env_id: str, episodes: int, seed: int) -> list[np.ndarray]:
    """The hidden (sparse) channel's per-step true reward of ``episodes`` uniform random episodes."""
    from prism.envs.registry import get_env_spec

    return [episode.rewards for episode in collect_random_episodes(get_env_spec(env_id), episodes, seed)]


def uniform_pearson(episodes: list[np.ndarray]) -> tuple[float, float]:
    """(Pearson of R/T with r_t over all steps, η from the between-episode variance share)."""
    true = np.concatenate(episodes)
    uniform = np.concatenate([np.full(len(r), r.mean()) for r in episodes])
    pearson = float(np.corrcoef(true, uniform)[0, 1])
    between = sum(len(r) * (r.mean() - true.mean()) ** 2 for r in episodes) / (len(true) * true.var())
    return pearson, float(np.sqrt(between))


def main(argv: list[str] | None = None) -> int:
    """``prism uniform-credit [--envs ENV ...] [--episodes N] [--seed S]``: one line per env."""
    parser = argparse.ArgumentParser(
        prog="prism uniform-credit",
        description="Pearson of uniform R/T redistribution with the hidden per-step reward (and the "
        "correlation ratio eta, computed independently), on uniform random episodes of each env.",
    )
    parser.add_argument("--envs", nargs="+", default=list(DEFAULT_EPISODES))
    parser.add_argument("--episodes", type=int, default=None, help="per env (default: 300 short, 60 long)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # Bad input is one line and exit 2 before any episode runs (an unknown id would otherwise end the run in
    # a traceback after the envs before it had run).
    from prism.envs.registry import get_env_spec
    from prism.envs.spec import SpecError

    if args.episodes is not None and args.episodes < 2:
        print(f"prism uniform-credit: --episodes: need at least 2, got {args.episodes}", file=sys.stderr)
        return 2
    for env_id in args.envs:
        try:
            get_env_spec(env_id)
        except SpecError as err:
            print(f"prism uniform-credit: --envs: {err}", file=sys.stderr)
            return 2
    for env_id in args.envs:
        start = time.perf_counter()
        episodes = random_episode_rewards(
            env_id, args.episodes or DEFAULT_EPISODES.get(env_id, 60), args.seed
        )
        pearson, eta = uniform_pearson(episodes)
        lengths = np.array([len(r) for r in episodes])
        print(
            f"{env_id}: {len(episodes)} random episodes (length {lengths.mean():.0f}, {lengths.min()}-"
            f"{lengths.max()}): Pearson(R/T, r_t) = {pearson:.3f}, eta = {eta:.3f}  "
            f"[{time.perf_counter() - start:.0f} s]",
            flush=True,
        )
    return 0

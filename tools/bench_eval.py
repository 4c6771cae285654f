"""Benchmark: prism's batched evaluation vs morl-baselines' ``policy_evaluation_mo`` (docs/method.md §9 protocol).

Both sides evaluate the *same* deterministic policy — a CAPQL actor MLP [256, 256] conditioned on the weight,
taken from a freshly built ``morl_baselines.multi_policy.capql.capql.CAPQL(env, log=False)``. The prism side
copies that actor's parameters into a plain torch MLP of the same architecture (a prism CAPQL module is built
elsewhere; this benchmark only needs the function obs, w -> tanh(μ(obs, w))). Protocol: mo-halfcheetah-v5
(episodes always 1000 steps), ``--weights`` equally spaced weights × ``--episodes`` episodes, then HV / EUM
(and VO / cardinality on the prism side).

- morl-baselines: for each weight, ``policy_evaluation_mo(agent, env, w, rep=episodes)`` — one env, one
  batch-1 forward per step — then its ``filter_pareto_dominated``, ``hypervolume``, ``expected_utility``.
- prism: one :func:`prism.loop.evaluate_policy` call (all weight × episode pairs in one batched rollout),
  timed from scratch, *including* building the env copies (later evaluations in a run reuse them).

One run each, prism first. Usage: ``python tools/bench_eval.py [--quick]``; ``--quick`` = 10 weights × 2
episodes. The last line printed is ``speedup_vs_morl_baselines: <x>x`` (morl-baselines time / prism time).

``--vs-gym-async`` instead compares prism's env pool (:class:`prism.evaluation.pool.EvalEnvPool`) with gymnasium's
``AsyncVectorEnv`` (``autoreset_mode=DISABLED``, one worker process per env copy; ``--gym-max-concurrency``
caps how many step at once): the same :func:`prism.evaluation.rollout.evaluate_policy` call (same seeds, same
batched policy) through each pool, the sides alternating over ``--rounds`` rounds (who goes first alternates
too), the results checked to be identical. The last line printed is ``gym_async_vs_prism_pool: <x>x``
(median AsyncVectorEnv time / median prism-pool time, env construction included; > 1: prism's pool is faster).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import platform
import sys
import time

import numpy as np
import torch
from torch import nn


class GymAsyncPool:
    """:class:`~prism.evaluation.pool.EvalEnvPool`'s interface (``reset``, ``step``, ``close``) on gymnasium's
    ``AsyncVectorEnv`` with autoreset off: one worker process per env copy. A vector env steps every copy at
    every call, so the actions of finished envs are zeros and their results are dropped (on
    mo-halfcheetah-v5 every episode lasts 1000 steps, so no copy finishes early)."""

    def __init__(self, spec, n_envs: int, max_concurrency: int | None = None) -> None:
        import gymnasium as gym
        from gymnasium.vector import AutoresetMode

        self.spec = spec
        self.vec = gym.vector.AsyncVectorEnv(
            [spec.make] * n_envs,
            context="fork",
            autoreset_mode=AutoresetMode.DISABLED,
            max_concurrency=max_concurrency,
        )
        self.num_workers = n_envs

    def reset(self, seeds) -> np.ndarray:
        obs, _ = self.vec.reset(seed=[int(s) for s in seeds])
        return np.asarray(obs, dtype=np.float32)

    def step(self, indices: np.ndarray, actions: np.ndarray):
        full = np.zeros((self.vec.num_envs, self.spec.act_dim), dtype=np.float32)
        full[indices] = actions
        obs, reward, terminated, truncated, _ = self.vec.step(full)  # spec.make: the plain dense env
        return obs[indices].astype(np.float32), reward[indices], terminated[indices], truncated[indices]

    def close(self) -> None:
        self.vec.close()


@contextlib.contextmanager
def quiet_c_stdout():
    """Silence C-level writes to stdout/stderr (MuJoCo prints a compiler deprecation warning per env build,
    and C stdio buffers would otherwise flush after our last line)."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    sys.stderr.flush()
    libc.fflush(None)
    saved = os.dup(1), os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        libc.fflush(None)
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


class Actor(nn.Module):
    """Our side's policy: the CAPQL actor shape (MLP [256, 256] on [obs, w], mean head), acting tanh(μ)."""

    def __init__(self, obs_dim: int, n_objectives: int, act_dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(obs_dim + n_objectives, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.mean = nn.Linear(hidden, act_dim)

    def policy_mean(self, obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return self.mean(self.trunk(torch.cat([obs, weight], dim=-1)))

    def forward(self, obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.policy_mean(obs, weight))

    def load_from_morl_baselines(self, policy: nn.Module) -> None:
        """Copy the peer's actor (``latent_pi`` Linear-ReLU-Linear-ReLU, ``mean`` head) into this one."""
        peer_linears = [m for m in policy.latent_pi if isinstance(m, nn.Linear)]
        ours = [m for m in self.trunk if isinstance(m, nn.Linear)]
        assert len(peer_linears) == len(ours)
        with torch.no_grad():
            for dst, src in zip(ours, peer_linears, strict=True):
                dst.weight.copy_(src.weight)
                dst.bias.copy_(src.bias)
            self.mean.weight.copy_(policy.mean.weight)
            self.mean.bias.copy_(policy.mean.bias)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 weights x 2 episodes")
    parser.add_argument("--weights", type=int, default=None)
    parser.add_argument("--episodes", type=int, default=None)
    parser.add_argument("--env", default="mo-halfcheetah-v5")
    parser.add_argument("--workers", type=int, default=-1, help="EvalEnvPool worker processes (-1 = auto)")
    parser.add_argument(
        "--vs-gym-async",
        action="store_true",
        help="compare EvalEnvPool with gymnasium's AsyncVectorEnv instead",
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of --vs-gym-async")
    parser.add_argument(
        "--gym-max-concurrency", type=int, default=None, help="AsyncVectorEnv max_concurrency"
    )
    args = parser.parse_args()
    n_weights = args.weights or (10 if args.quick else 100)
    episodes = args.episodes or (2 if args.quick else 5)
    if args.vs_gym_async:
        compare_pools(args, n_weights, episodes)
        return

    import mo_gymnasium as mo_gym
    from morl_baselines.common.evaluation import policy_evaluation_mo
    from morl_baselines.common.pareto import filter_pareto_dominated
    from morl_baselines.common.performance_indicators import expected_utility as mb_eum
    from morl_baselines.common.performance_indicators import hypervolume as mb_hv
    from morl_baselines.multi_policy.capql.capql import CAPQL

    from prism.envs import get_env_spec
    from prism.loop import EvalEnvPool, evaluate_policy
    from prism.metrics import equally_spaced_weights

    spec = get_env_spec(args.env)
    n_obj = spec.n_objectives
    print(
        f"bench_eval: {args.env}, {n_weights} weights x {episodes} episodes, torch {torch.__version__}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load avg {os.getloadavg()[0]:.2f} (machine shared with other jobs)"
    )

    # weight sets outside the timed regions (pymoo's energy method takes seconds; cached afterwards)
    weights = equally_spaced_weights(n_obj, n_weights)
    eum_weights = equally_spaced_weights(n_obj, 50)
    ref_point = np.asarray(spec.ref_point)

    torch.manual_seed(0)  # CAPQL seeds numpy/random but its network init draws from torch's RNG
    with quiet_c_stdout():
        peer_env = mo_gym.make(args.env, max_episode_steps=spec.max_episode_steps)
        agent = CAPQL(peer_env, log=False, seed=0, device="cpu", buffer_size=1000)
    actor = Actor(spec.obs_dim, n_obj, spec.act_dim)
    actor.load_from_morl_baselines(agent.policy)
    actor.eval()
    probe_obs = torch.randn(4, spec.obs_dim)
    probe_w = torch.as_tensor(weights[:4], dtype=torch.float32)
    with torch.no_grad():
        assert torch.allclose(
            actor(probe_obs, probe_w), agent.policy.get_action(probe_obs, probe_w), atol=1e-6
        )

    # ---- prism: one batched evaluation, from scratch (env copies built inside the timing) ----
    t0 = time.perf_counter()
    pool = EvalEnvPool(spec, num_workers=args.workers)
    with quiet_c_stdout():
        pool.ensure(n_weights * episodes)
    t_build = time.perf_counter() - t0
    result = evaluate_policy(
        actor, spec, weights, episodes, gamma=0.99, seed=0, eum_weights=eum_weights, pool=pool
    )
    t_ours = time.perf_counter() - t0
    workers = pool.num_workers
    pool.close()
    steps = result.total_steps
    print(
        f"prism: {t_ours:.2f} s ({t_build:.2f} s building {n_weights * episodes} envs, "
        f"{result.wall_time:.2f} s rollout+metrics, {workers} worker processes + main), {steps} env steps, "
        f"{steps / t_ours:.0f} steps/s; hv {result.hv:.1f} eum {result.eum:.2f} vo {result.vo:.2f} "
        f"cardinality {result.cardinality}"
    )

    # ---- morl-baselines: policy_evaluation_mo per weight, then its metrics ----
    t0 = time.perf_counter()
    front = []
    for w in weights:
        _, _, _, disc_vec = policy_evaluation_mo(agent, peer_env, w.astype(np.float32), rep=episodes)
        front.append(disc_vec)
    filtered = list(filter_pareto_dominated(front))
    peer_hv = mb_hv(ref_point, filtered)
    peer_eum = mb_eum(filtered, weights_set=list(eum_weights))
    t_peer = time.perf_counter() - t0
    print(
        f"morl-baselines: {t_peer:.2f} s, {steps} env steps (same protocol), {steps / t_peer:.0f} steps/s; "
        f"hv {peer_hv:.1f} eum {peer_eum:.2f}"
    )
    # different episodes (unseeded resets on their side) but the same policy: metrics should be close
    print(f"speedup excluding env construction: {t_peer / result.wall_time:.2f}x")
    print(f"speedup_vs_morl_baselines: {t_peer / t_ours:.2f}x")


def compare_pools(args, n_weights: int, episodes: int) -> None:
    """prism's EvalEnvPool vs an AsyncVectorEnv-based pool on the same evaluate_policy call, alternating."""
    from prism.envs import get_env_spec
    from prism.loop import EvalEnvPool, evaluate_policy
    from prism.metrics import equally_spaced_weights

    spec = get_env_spec(args.env)
    n_envs = n_weights * episodes
    print(
        f"bench_eval --vs-gym-async: {args.env}, {n_weights} weights x {episodes} episodes ({n_envs} env copies), "
        f"{args.rounds} alternating rounds, {os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.2f}"
    )
    weights = equally_spaced_weights(spec.n_objectives, n_weights)
    eum_weights = equally_spaced_weights(spec.n_objectives, 50)
    torch.manual_seed(0)
    actor = Actor(spec.obs_dim, spec.n_objectives, spec.act_dim).eval()  # the same batched policy both sides

    def build(side: str, n: int):
        if side == "prism":
            pool = EvalEnvPool(spec, num_workers=args.workers)
            pool.ensure(n)
            return pool
        return GymAsyncPool(spec, n, max_concurrency=args.gym_max_concurrency)

    # untimed warm-up: one-off imports and caches would favour whoever runs second
    for side in ("prism", "gym"):
        with quiet_c_stdout():
            pool = build(side, 1)
        evaluate_policy(actor, spec, weights[:1], 1, seed=0, eum_weights=eum_weights, pool=pool)
        pool.close()

    times: dict[str, list[float]] = {"prism": [], "gym": []}
    rollouts: dict[str, list[float]] = {"prism": [], "gym": []}
    returns: dict[str, np.ndarray] = {}
    for r in range(args.rounds):
        for side in ("prism", "gym") if r % 2 == 0 else ("gym", "prism"):
            t0 = time.perf_counter()
            with quiet_c_stdout():
                pool = build(side, n_envs)
            result = evaluate_policy(
                actor, spec, weights, episodes, gamma=0.99, seed=0, eum_weights=eum_weights, pool=pool
            )
            elapsed = time.perf_counter() - t0
            workers = pool.num_workers
            pool.close()
            times[side].append(elapsed)
            rollouts[side].append(result.wall_time)
            if side in returns:
                assert np.array_equal(returns[side], result.returns)
            returns[side] = result.returns
            print(
                f"round {r} {side:5s}: {elapsed:6.2f} s ({result.wall_time:6.2f} s rollout+metrics, "
                f"{workers} worker processes), {result.total_steps} env steps, hv {result.hv:.3f}"
            )
    assert np.array_equal(returns["prism"], returns["gym"]), "the two pools gave different returns"
    print("same returns on both sides (bit for bit)")
    med = {side: float(np.median(v)) for side, v in times.items()}
    med_roll = {side: float(np.median(v)) for side, v in rollouts.items()}
    print(
        f"median rollout+metrics: prism {med_roll['prism']:.2f} s, gym {med_roll['gym']:.2f} s "
        f"(ratio {med_roll['gym'] / med_roll['prism']:.2f}x)"
    )
    print(f"gym_async_vs_prism_pool: {med['gym'] / med['prism']:.2f}x")


if __name__ == "__main__":
    main()

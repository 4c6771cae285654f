"""Benchmark: one batched K = 3 ReSymNet fit vs three K = 1 fits one after another.

    python tools/bench_reward_fit.py [--quick] [--env mo-hopper-v5] [--episodes N] [--epochs E]

Both arms use the same segments (random-policy episodes through the sparse wrapper, channel 0 sparse), the
same split seed, the same number of epochs (early stopping disabled: patience > epochs) and batch size 32,
and the paper's network (hidden 256, dropout 0.3). Each arm is timed end to end through
``fit_reward_model`` (Trainer set-up included), in wall time and in this process's CPU time (the steadier
number on a shared machine). The last line is the wall-time ratio, ``speedup_vs_sequential: <x>x``.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from prism.data.collect import collect_episodes, uniform_random_policy
from prism.data.segments import SegmentStore
from prism.envs import get_env_spec, make_env
from prism.reward.config import RewardConfig
from prism.reward.module import fit_reward_model


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small data and few epochs (< 2 minutes)")
    parser.add_argument("--env", default="mo-hopper-v5")
    parser.add_argument("--episodes", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    episodes = args.episodes or (100 if args.quick else 500)
    epochs = args.epochs or (3 if args.quick else 10)

    spec = get_env_spec(args.env)
    env = make_env(spec, sparse_channel=0, p_rel=0.0, seed=args.seed)
    store = SegmentStore(spec.obs_dim, spec.act_dim, spec.n_objectives - 1)
    stats = collect_episodes(
        env, uniform_random_policy(env.action_space, args.seed), episodes, store, 0, seed=args.seed
    )
    print(
        f"data: {args.env} {stats.episodes} episodes, {stats.steps} steps, {stats.segments} segments; "
        f"epochs={epochs} batch=32 hidden=256 K={args.members}; torch threads={torch.get_num_threads()}, "
        f"cpus={os.cpu_count()}, load={os.getloadavg()[0]:.2f}"
    )

    def config(k: int) -> RewardConfig:
        return RewardConfig(ensemble_size=k, max_epochs=epochs, patience=epochs + 1)

    # Warm-up (allocator, first-call kernels) so neither arm pays it alone.
    fit_reward_model(store, RewardConfig(ensemble_size=1, max_epochs=1, patience=2, hidden=256), seed=99)

    t0, c0 = time.perf_counter(), time.process_time()
    batched = fit_reward_model(store, config(args.members), seed=args.seed)
    t_batched, c_batched = time.perf_counter() - t0, time.process_time() - c0
    print(
        f"batched K={args.members}: wall {t_batched:.2f}s cpu {c_batched:.2f}s (epochs {batched.fit_summary.epochs_run})"
    )

    t0, c0 = time.perf_counter(), time.process_time()
    for k in range(args.members):
        single = fit_reward_model(store, config(1), seed=args.seed + k)
        assert single.fit_summary.epochs_run == [epochs]
    t_seq, c_seq = time.perf_counter() - t0, time.process_time() - c0
    print(f"sequential {args.members} x K=1: wall {t_seq:.2f}s cpu {c_seq:.2f}s")
    # On a shared machine wall time depends on other jobs; this process's CPU time much less so.
    print(f"load_after={os.getloadavg()[0]:.2f} cpu_time_ratio={c_seq / c_batched:.2f}x")
    print(f"speedup_vs_sequential: {t_seq / t_batched:.2f}x")


if __name__ == "__main__":
    main()

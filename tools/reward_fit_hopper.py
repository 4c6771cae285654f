"""Fit ReSymNet on random-policy mo-hopper-v5 data with channel 0 sparse; report held-out correlation and time.

    python tools/reward_fit_hopper.py [--episodes 500] [--ensemble 3] [--max-epochs 1000] [--seed 0]

Held-out numbers come from two places: the fit's own 20 % validation segments, and a fresh set of episodes
(``--test-episodes``) collected with another seed that the fit never saw.
"""

from __future__ import annotations

import argparse
import time

import torch

from prism.data.collect import collect_episodes, uniform_random_policy
from prism.data.segments import SegmentStore
from prism.envs import get_env_spec, make_env
from prism.reward.config import ReSymNetConfig
from prism.reward.losses import pearson_correlation
from prism.reward.models.resymnet_fit import fit_resymnet_model


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="mo-hopper-v5")
    parser.add_argument("--channel", type=int, default=0)
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--test-episodes", type=int, default=100)
    parser.add_argument("--ensemble", type=int, default=3)
    parser.add_argument("--max-epochs", type=int, default=1000)
    parser.add_argument("--no-dense", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    spec = get_env_spec(args.env)
    n_dense = 0 if args.no_dense else spec.n_objectives - 1

    def collect(n: int, seed: int) -> SegmentStore:
        env = make_env(spec, sparse_channel=args.channel, p_rel=0.0, seed=seed)
        store = SegmentStore(spec.obs_dim, spec.act_dim, n_dense)
        t0 = time.perf_counter()
        stats = collect_episodes(
            env,
            uniform_random_policy(env.action_space, seed),
            n,
            store,
            args.channel,
            use_dense_features=not args.no_dense,
            seed=seed,
        )
        print(
            f"collected {stats.episodes} episodes, {stats.steps} steps, {stats.segments} segments "
            f"(mean length {stats.mean_episode_length:.1f}) in {time.perf_counter() - t0:.1f}s"
        )
        return store

    store = collect(args.episodes, args.seed)
    test = collect(args.test_episodes, args.seed + 10_000)
    cfg = ReSymNetConfig(
        ensemble_size=args.ensemble, max_epochs=args.max_epochs, use_dense_features=not args.no_dense
    )
    print(f"threads={torch.get_num_threads()} config={cfg}")
    model, s = fit_resymnet_model(store, cfg, seed=args.seed)
    pred = model.predict(test.features)
    corr = float(pearson_correlation(pred, test.true_sparse))
    sums = torch.zeros(test.num_segments).index_add_(0, test.segment_index, pred)
    rel = float(((sums - test.targets).abs() / test.targets.abs().clamp_min(1e-8)).mean())
    print(
        f"epochs_run={s.epochs_run} best_epoch={s.best_epoch} best_val_loss={[round(v, 4) for v in s.best_val_loss]}"
    )
    print(f"val_split: per-step corr={s.val_correlation:.4f} segment rel err={s.val_segment_rel_error:.4f}")
    print(f"fresh episodes: per-step corr={corr:.4f} segment rel err={rel:.4f}")
    print(f"fit_wall_time_s: {s.wall_time_s:.1f}")


if __name__ == "__main__":
    main()

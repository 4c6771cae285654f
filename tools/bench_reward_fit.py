"""Benchmarks of the ReSymNet fit.

    python tools/bench_reward_fit.py [--quick] [--env mo-hopper-v5] [--episodes N] [--epochs E]
    python tools/bench_reward_fit.py --long [--rounds R] [--epochs E] [--long-segments L] [--short-segments S]
    python tools/bench_reward_fit.py --memory [--epochs E] [--long-segments L] [--short-segments S]

Default mode: one batched K = 3 ReSymNet fit vs three K = 1 fits one after another.

Both arms use the same segments (random-policy episodes through the sparse wrapper, channel 0 sparse), the
same split seed, the same number of epochs (early stopping disabled: patience > epochs) and batch size 32,
and the paper's network (hidden 256, dropout 0.3). Each arm is timed end to end through
``fit_resymnet_model`` (Trainer set-up included), in wall time and in this process's CPU time (the steadier
number on a shared machine). The last line is the wall-time ratio, ``speedup_vs_sequential: <x>x``.

``--long``: seconds per epoch of the fit before and after the fast path, on data shaped like a hopper refit
after the first RL cycle: S = 1000 short segments (8–39 steps, like the initial random-policy episodes) and
L = 100 long ones (975–1000 steps, like expert episodes), ~121 000 steps of hopper's width (11 + 3 + 2 = 16
features). The features are *synthetic* (Gaussian, fixed seed; target = Σ tanh(w·h_t)): a fit's cost does not
depend on the values, and no policy needs training to produce 1000-step episodes. Both arms run the paper's
fit (K = 3, hidden 256, dropout 0.3, batch 32) for E epochs with early stopping out of reach, alternating
within each of R rounds:

- ``before``: the padded layout (every member's batch padded to the longest one, MKL GEMMs, masks drawn
  inline) on one thread: what a run (``threads: 1``) did;
- ``after``: what such a run's fit does now (``reward.threads: 0`` = the run's one thread): the ragged layout
  with oneDNN GEMMs and fused LayerNorm, the dropout masks drawn one batch ahead on a worker thread;
- ``after_2threads``: the same with ``reward.threads: 2`` (masks inline; pays only on an idle machine).

Seconds per epoch are each fit's median epoch (training + validation); the last line is the ratio of the
medians over rounds, ``epoch_speedup: <x>x``.

``--memory``: the fit's peak resident memory under glibc's allocator settings, on ``--long``'s data shape
(E epochs, 2 by default). Each arm is a fresh child process (the same fit, ``reward.threads: 0``) with one
environment setting: ``default`` (glibc's dynamic mmap threshold), and ``MALLOC_MMAP_THRESHOLD_`` fixed at
1, 8 and 32 MiB (a fixed threshold sends every larger block to ``mmap``, returned to the system on free,
and turns the dynamic threshold off). Each line gives the child's peak and final RSS (``VmHWM``, ``VmRSS``),
its RSS once :func:`prism.core.memory.release_freed_memory` has run (as a run does after each fit) and its median
seconds per epoch; the last line is ``peak_rss_default_over_1MiB: <x>x``. Why: glibc raises
its mmap threshold to the size of each large block freed (up to 32 MiB), after which the fit's activations
of varying sizes (ragged batches) come from the heap and fragment it; a run's RSS then stays at its peak.

``--quality``: the fit's cheaper options (``reward.loss``, ``reward.sampled_steps``, ``reward.bias_correction``,
``reward.precision``) side by side in one process, on the cycle-0 store a run fits (N random-policy episodes
through the sparse wrapper, the env's conf: hidden channel, p_rel), with the paper's network and optimiser:

    python tools/bench_reward_fit.py --quality --envs swimmer,halfcheetah --episodes 1000 --fit-seeds 0,1,2 \
        --options sum@3,randomized,randomized+bc --epochs 100 [--expert-run halfcheetah=RUN_DIR] [--stores DIR]

Each option is ``loss[+bc][+strat][+bf16][+lrX][+patienceP][+valV][+padded][+refit|+warm][+polishP][:K][@E]``
(``+bc`` bias correction, ``+strat`` ``reward.sampling: stratified``, ``+bf16`` bf16-mixed, ``+lrX`` /
``+patienceP`` that learning rate / patience, ``+valV`` ``reward.val_every: V``, ``+padded`` the padded batch
layout (one batched pass of the K members) instead of the CPU's ragged one, ``+polishP`` then P epochs of eq. 1 from the
fitted members on the same split, the learning rate going on from the first fit's schedule,
``:K`` sampled steps, default 64; ``@E`` caps that option's epochs, e.g. ``sum@3`` to time eq. 1's epochs
without its hours). ``loss`` ``rrd`` is RRD's reward model instead (``reward.name: rrd``: its network on
``[s, a, s']``, Adam at ``reward.rrd.lr``, 4 segments × K per batch, bias correction off unless ``+bc``; ``+lrX``
sets ``reward.rrd.lr``), fitted on the same episodes collected again with their next observations, e.g.
``rrd@100,rrd+bc@100,rrd+patience320@1600`` for RRD at table1-study's fit budget and at 16× its epochs (an
RRD epoch samples K = 64 of a 1000-step episode's steps, ~1/16 of what an eq. 1 epoch reads). ``+refit`` / ``+warm``: after the cycle-0 fit, the cycle-1 refit on the random episodes
plus the ``--expert-run`` episodes (then in training, so the expert Pearson is an in-sample number), from
scratch or warm-started from the cycle-0 members (``reward.warm_start``); the line gives the refit's numbers.
Every fit sees the same store and split seed; a line per fit gives s/epoch (median, training + validation),
epochs run and best epoch per member, fit wall, validation Pearson of the ensemble's per-step prediction with
the hidden channel, validation episode-sum MSE (mean over members), and the Pearson on held-out episodes of a
trained policy (``--expert-run ENV=RUN_DIR``: E = ``--expert-episodes`` episodes of that run's expert policy,
as the loop collects them; "—" without one). A summary line per env and option gives the means over fit seeds
and the s/epoch ratio to eq. 1's. Stores are cached in ``--stores`` (collection of 10⁶ steps takes minutes).

``--stacked S``: a population's refit: S stores shaped like ``--long``'s (one per member, seeds differ) fitted
in one stacked S × K fit (``reward.stacked_fit``, prism/reward/fitting/stacked.py) vs the S members' fits one after
the other (``fit_resymnet_model``, the run's default), E epochs each, early stopping out of reach; the last
line is the wall-time ratio, ``stacked_speedup_vs_sequential: <x>x``. The issue's GPU goal is S = 10 on
~122 000 steps per member (the ``--long`` defaults).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from prism.core.memory import release_freed_memory
from prism.data.collect import collect_episodes, uniform_random_policy
from prism.data.segments import SegmentStore
from prism.envs import get_env_spec, make_env
from prism.reward.config import ReSymNetConfig, RRDConfig, RRDRewardConfig
from prism.reward.models.resymnet_fit import fit_resymnet_model
from prism.reward.models.resymnet_fit import fit_resymnet_population as fit_reward_models_stacked
from prism.reward.models.rrd import fit_rrd_model

# mo-hopper-v5: 11 observation, 3 action, 2 dense-reward columns (channel 0 sparse).
HOPPER_WIDTHS = (11, 3, 2)


def synthetic_hopper_store(n_long: int, n_short: int, seed: int = 0) -> SegmentStore:
    """``n_long`` segments of 975–1000 steps and ``n_short`` of 8–39, shuffled, hopper's feature width."""
    obs, act, dense = HOPPER_WIDTHS
    g = torch.Generator().manual_seed(seed)
    lengths = torch.cat(
        [torch.randint(975, 1001, (n_long,), generator=g), torch.randint(8, 40, (n_short,), generator=g)]
    )
    lengths = lengths[torch.randperm(lengths.numel(), generator=g)].tolist()
    total = sum(lengths)
    store = SegmentStore(obs, act, dense, capacity=total)
    w = torch.randn(obs + act + dense, generator=g)
    features = torch.randn(total, obs + act + dense, generator=g)
    start = 0
    for t in lengths:
        x = features[start : start + t]
        truth = torch.tanh(x @ w)
        released = torch.zeros(t, dtype=torch.bool)
        released[-1] = True
        emitted = torch.zeros(t)
        emitted[-1] = truth.sum()
        store.add_episode(x, released, emitted, truth)
        start += t
    return store


def bench_long(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)  # as a run with the default `threads: 1`
    store = synthetic_hopper_store(args.long_segments, args.short_segments, seed=args.seed)
    epochs = args.epochs or 2
    print(
        f"data: synthetic hopper-width, {store.num_segments} segments ({args.long_segments} of 975-1000 steps, "
        f"{args.short_segments} of 8-39), {len(store)} steps; epochs={epochs} per fit, rounds={args.rounds}, "
        f"K={args.members} hidden=256 batch=32; cpus={os.cpu_count()}, load={os.getloadavg()[0]:.2f}"
    )
    arms = {
        "before": ("padded", 1),
        "after": ("auto", 0),  # inherits the process's one thread
        "after_2threads": ("auto", 2),
    }
    per_epoch: dict[str, list[float]] = {name: [] for name in arms}
    for r in range(args.rounds):
        line = []
        for name, (layout, threads) in arms.items():
            cfg = ReSymNetConfig(
                ensemble_size=args.members, max_epochs=epochs, patience=epochs + 1, threads=threads
            )
            c0 = time.process_time()
            model = fit_resymnet_model(store, cfg, seed=args.seed, layout=layout, device=args.device)
            cpu = (time.process_time() - c0) / epochs
            per_epoch[name].append(model.summary.seconds_per_epoch)
            line.append(f"{name} {per_epoch[name][-1]:.2f}s/epoch (cpu {cpu:.2f}s)")
        ratio = per_epoch["before"][-1] / per_epoch["after"][-1]
        print(f"round {r}: " + ", ".join(line) + f"; ratio {ratio:.2f}x; load={os.getloadavg()[0]:.2f}")
    med = {name: statistics.median(v) for name, v in per_epoch.items()}
    print(
        "median s/epoch: "
        + ", ".join(f"{name} {v:.2f}" for name, v in med.items())
        + f"; before/after_2threads {med['before'] / med['after_2threads']:.2f}x"
    )
    print(f"epoch_speedup: {med['before'] / med['after']:.2f}x")


MEMORY_ARMS = {
    "default": None,
    "mmap_threshold_1MiB": 1 << 20,
    "mmap_threshold_8MiB": 8 << 20,
    "mmap_threshold_32MiB": 32 << 20,
}


def _memory_child(args: argparse.Namespace) -> None:
    """One ``--memory`` arm (in a child process): the fit, then ``peak_mib final_mib released_mib s_per_epoch``
    (``released``: the RSS once :func:`prism.core.memory.release_freed_memory` has run, as a run does after a fit)."""
    torch.set_num_threads(1)
    store = synthetic_hopper_store(args.long_segments, args.short_segments, seed=args.seed)
    epochs = args.epochs or 2
    cfg = ReSymNetConfig(ensemble_size=args.members, max_epochs=epochs, patience=epochs + 1, threads=0)
    model = fit_resymnet_model(store, cfg, seed=args.seed)
    status = _vm_mib()
    release_freed_memory()
    print(f"{status['VmHWM']} {status['VmRSS']} {_vm_mib()['VmRSS']} {model.summary.seconds_per_epoch:.2f}")


def _vm_mib() -> dict[str, int]:
    """This process's peak and current resident memory (``VmHWM``, ``VmRSS``) in MiB."""
    lines = Path("/proc/self/status").read_text().splitlines()
    return {ln.split(":")[0]: int(ln.split()[1]) // 1024 for ln in lines if ln.startswith(("VmHWM", "VmRSS"))}


def bench_memory(args: argparse.Namespace) -> None:
    import subprocess
    import sys

    print(
        f"data: synthetic hopper-width, {args.long_segments} segments of 975-1000 steps and "
        f"{args.short_segments} of 8-39; epochs={args.epochs or 2}, K={args.members}, hidden=256, batch=32, one "
        f"thread, each arm a fresh process; cpus={os.cpu_count()}, load={os.getloadavg()[0]:.2f}"
    )
    peaks = {}
    for name, threshold in MEMORY_ARMS.items():
        env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
        if threshold is not None:
            env["MALLOC_MMAP_THRESHOLD_"] = str(threshold)
        cmd = [sys.executable, __file__, "--memory-child", "--long-segments", str(args.long_segments),
               "--short-segments", str(args.short_segments), "--members", str(args.members),
               "--seed", str(args.seed)] + (["--epochs", str(args.epochs)] if args.epochs else [])  # fmt: skip
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.split()
        peak, final, released, per_epoch = int(out[-4]), int(out[-3]), int(out[-2]), float(out[-1])
        peaks[name] = peak
        print(
            f"{name}: peak RSS {peak} MiB, final RSS {final} MiB, {released} MiB after release_freed_memory, "
            f"{per_epoch:.2f} s/epoch",
            flush=True,
        )
    print(f"peak_rss_default_over_1MiB: {peaks['default'] / peaks['mmap_threshold_1MiB']:.2f}x")


def bench_stacked(args: argparse.Namespace) -> None:
    members = args.stacked
    stores = [
        synthetic_hopper_store(args.long_segments, args.short_segments, seed=args.seed + s)
        for s in range(members)
    ]
    seeds = [args.seed * 1_000 + s for s in range(members)]
    epochs = args.epochs or 2
    cfg = ReSymNetConfig(ensemble_size=args.members, max_epochs=epochs, patience=epochs + 1)
    print(
        f"data: {members} synthetic hopper-width stores of {len(stores[0])} steps each "
        f"({stores[0].num_segments} segments); epochs={epochs}, K={args.members}, hidden=256, batch=32, "
        f"device={args.device}; cpus={os.cpu_count()}, load={os.getloadavg()[0]:.2f}"
    )
    # Warm-up (allocator, kernels, Trainer imports) so neither arm pays it alone.
    warm = ReSymNetConfig(ensemble_size=args.members, max_epochs=1, patience=2)
    fit_reward_models_stacked(stores[:2] if members > 1 else stores, warm, seeds[:2], device=args.device)
    t0 = time.perf_counter()
    stacked = fit_reward_models_stacked(stores, cfg, seeds, device=args.device)
    t_stacked = time.perf_counter() - t0
    assert all(m.summary.epochs_run == [epochs] * args.members for m in stacked)
    t0 = time.perf_counter()
    for store, seed in zip(stores, seeds):
        fit_resymnet_model(store, cfg, seed=seed, device=args.device)
    t_seq = time.perf_counter() - t0
    print(
        f"stacked S={members} x K={args.members}: wall {t_stacked:.2f}s; sequential {members} fits: wall {t_seq:.2f}s"
    )
    print(f"stacked_speedup_vs_sequential: {t_seq / t_stacked:.2f}x")


QUALITY_ENVS = {"swimmer": "conf/swimmer.yaml", "halfcheetah": "conf/halfcheetah.yaml", "hopper": "conf/hopper.yaml",
                 "walker": "conf/walker.yaml"}  # fmt: skip


def _run_config(env: str):
    from prism.config import load_config

    return load_config([str(Path(__file__).resolve().parents[1] / QUALITY_ENVS[env])], [])


def _env_and_store(env: str, next_obs: bool = False):
    """The env (sparse wrapper, the conf's channel and p_rel) and an empty store of its width: ReSymNet's
    ``[s, a, r_dense]``, or RRD's ``[s, a, s']`` (``next_obs``, no dense channel)."""
    from prism.config.validation import sparse_channel

    config = _run_config(env)
    spec = get_env_spec(config.env.id)
    channel = sparse_channel(config, spec)
    wrapped = make_env(spec, sparse_channel=channel, p_rel=config.env.p_rel, seed=0)
    n_dense = 0 if next_obs else spec.n_objectives - 1
    return (
        config,
        spec,
        channel,
        wrapped,
        SegmentStore(spec.obs_dim, spec.act_dim, n_dense, next_obs=next_obs),
    )


def quality_store(
    env: str, episodes: int, cache: Path | None, seed: int = 0, next_obs: bool = False
) -> SegmentStore:
    """Cycle 0's store: ``episodes`` uniform-random episodes through the env's sparse wrapper (cached); with
    ``next_obs``, RRD's (the same episodes: same seeds)."""
    kind = "-next" if next_obs else ""
    path = None if cache is None else cache / f"{env}-random{episodes}-seed{seed}{kind}.pt"
    if path is not None and path.exists():
        return SegmentStore.from_state_dict(torch.load(path, weights_only=True))
    _, spec, channel, wrapped, store = _env_and_store(env, next_obs)
    t0 = time.perf_counter()
    policy = uniform_random_policy(wrapped.action_space, seed=seed)
    collect_episodes(
        wrapped, policy, episodes, store, sparse_channel=channel, use_dense_features=not next_obs, seed=seed
    )
    print(
        f"{env}: collected {episodes} random episodes, {len(store)} steps in {time.perf_counter() - t0:.0f}s"
    )
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(store.state_dict(), path)
    return store


def expert_store(
    env: str, run_dir: str, episodes: int, cache: Path | None, next_obs: bool = False
) -> SegmentStore:
    """``episodes`` episodes of a trained run's expert policy (random preference per episode, as the loop
    collects them), through the same wrapper (cached); ``next_obs`` as :func:`quality_store`."""
    from prism.api import load_run

    kind = "-next" if next_obs else ""
    path = None if cache is None else cache / f"{env}-expert{episodes}-{Path(run_dir).name}{kind}.pt"
    if path is not None and path.exists():
        return SegmentStore.from_state_dict(torch.load(path, weights_only=True))
    _, _, channel, wrapped, store = _env_and_store(env, next_obs)
    run = load_run(run_dir)
    for e in range(episodes):
        policy = run.agent.expert_policy(seed=10_000 + e)
        collect_episodes(
            wrapped,
            policy,
            1,
            store,
            sparse_channel=channel,
            use_dense_features=not next_obs,
            seed=10_000 + e,
        )
    print(f"{env}: {episodes} episodes of {run_dir} (env steps {run.env_steps}), {len(store)} steps")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(store.state_dict(), path)
    return store


def parse_option(text: str, base: dict) -> tuple[dict, int | None]:
    """``loss[+bc][+bf16][:K][@E]`` → (ReSymNetConfig keys, epoch cap or None). ``loss`` ``rrd`` is RRD's model
    (``reward.name: rrd``, its own network, Adam and batch; ``+lrX`` sets ``reward.rrd.lr``)."""
    cap = None
    if "@" in text:
        text, cap_text = text.split("@", 1)
        cap = int(cap_text)
    k = None
    if ":" in text:
        text, k_text = text.split(":", 1)
        k = int(k_text)
    parts = text.split("+")
    if parts[0] == "rrd":  # RRD's own network and optimiser: only the fit's shared keys carry over
        keys = dict(
            name="rrd", max_epochs=base["max_epochs"], patience=base["patience"], bias_correction=False
        )
    else:
        keys = dict(base, loss=parts[0], bias_correction=False)  # (the plain form unless +bc)
    for flag in parts[1:]:
        if flag == "bc":
            keys["bias_correction"] = True
        elif flag == "bf16":
            keys["precision"] = "bf16-mixed"
        elif flag == "strat":
            keys["sampling"] = "stratified"
        elif flag in ("refit", "warm"):
            keys["_refit"] = flag
        elif flag.startswith("lr"):
            if keys.get("name") == "rrd":
                keys["rrd"] = RRDConfig(lr=float(flag[2:]))
            else:
                keys["lr"] = float(flag[2:])
        elif flag.startswith("patience") and flag[8:].isdigit():
            keys["patience"] = int(flag[8:])
        elif flag.startswith("polish") and flag[6:].isdigit():
            keys["_polish"] = int(flag[6:])
        elif flag.startswith("val") and flag[3:].isdigit():
            keys["val_every"] = int(flag[3:])
        elif flag == "padded":
            keys["_layout"] = "padded"
        else:
            raise SystemExit(f"bench_reward_fit: --options: unknown flag '+{flag}' in '{text}'")
    if k is not None:
        keys["sampled_steps"] = k
    if cap is not None:
        keys["max_epochs"] = cap
    return keys, cap


def reward_config(keys: dict) -> ReSymNetConfig | RRDRewardConfig:
    """The reward config of a parsed option: RRD's for ``name: rrd``, ReSymNet's otherwise."""
    return RRDRewardConfig(**keys) if keys.get("name") == "rrd" else ReSymNetConfig(**keys)


def bench_quality(args: argparse.Namespace) -> None:
    from prism.reward.losses import pearson_correlation

    torch.set_num_threads(1)  # as a run with the default `threads: 1`
    cache = Path(args.stores) if args.stores else None
    experts = (
        dict(pair.split("=", 1) for pair in args.expert_run.split(",") if pair) if args.expert_run else {}
    )
    seeds = [int(x) for x in args.fit_seeds.split(",")]
    for env in args.envs.split(","):
        config = _run_config(env)
        base = {k: vars(config.reward)[k] for k in ("ensemble_size", "hidden", "dropout", "lr", "batch_size")}
        base.update(max_epochs=args.epochs, patience=args.patience)
        # Every option parsed and checked before anything is collected or fitted (a bad option fails at once).
        parsed = []
        for option in args.options.split(","):
            keys, _ = parse_option(option, base)
            refit, polish = keys.pop("_refit", None), keys.pop("_polish", 0)
            layout = keys.pop("_layout", "auto")
            is_rrd = keys.get("name") == "rrd"
            if is_rrd and (refit or polish):
                raise SystemExit(
                    f"bench_reward_fit: option '{option}': +refit, +warm and +polish are ReSymNet's"
                )
            if refit and env not in experts:
                raise SystemExit(
                    f"bench_reward_fit: option '{option}' refits on expert episodes: give --expert-run"
                )
            parsed.append((option, keys, refit, polish, is_rrd, layout))
        # ReSymNet reads [s, a, r_dense], RRD [s, a, s']: each collects the same episodes (same seeds).
        stores = {}
        for is_rrd in sorted({entry[4] for entry in parsed}):
            held = (
                expert_store(env, experts[env], args.expert_episodes, cache, is_rrd)
                if env in experts
                else None
            )
            stores[is_rrd] = (quality_store(env, args.episodes, cache, next_obs=is_rrd), held)
        store, held_out = next(iter(stores.values()))
        print(
            f"{env}: {store.num_segments} segments, {len(store)} steps; epochs<={args.epochs}, patience "
            f"{args.patience}, K={base['ensemble_size']}, hidden {base['hidden']}, batch {base['batch_size']}; "
            f"held-out: {held_out.num_segments if held_out else 0} expert segments; cpus={os.cpu_count()}, "
            f"load={os.getloadavg()[0]:.2f}",
            flush=True,
        )
        summary: dict[str, list[tuple[float, ...]]] = {}
        for option, keys, refit, polish, is_rrd, layout in parsed:
            fit_fn = fit_rrd_model if is_rrd else fit_resymnet_model
            store, held_out = stores[is_rrd]
            for seed in seeds:
                t0 = time.perf_counter()
                model, fit = fit_fn(store, reward_config(keys), seed=seed, layout=layout)
                wall = time.perf_counter() - t0
                if polish:
                    # The cheap fit, then P epochs of eq. 1 from its members (same split), the learning rate
                    # going on from where the cheap fit's schedule left it.
                    print(f"{env} {option} seed {seed}: before polish {wall / 60:.1f} min, epochs "
                          f"{fit.epochs_run}, val Pearson {fit.val_correlation:.3f}", flush=True)  # fmt: skip
                    lr = keys["lr"] * ReSymNetConfig().lr_decay ** max(fit.epochs_run)
                    polish_keys = dict(keys, loss="sum", bias_correction=False, sampling="uniform",
                                       max_epochs=polish, lr=lr)  # fmt: skip
                    model, fit = fit_resymnet_model(
                        store, ReSymNetConfig(**polish_keys), seed=seed, init=model
                    )
                    wall = time.perf_counter() - t0
                if refit:
                    # Cycle 1 as the loop runs it: the random episodes plus the expert ones, refitted from
                    # scratch (+refit) or from cycle 0's members (+warm); its numbers are the refit's.
                    print(f"{env} {option} seed {seed}: cycle-0 fit {wall / 60:.1f} min, val Pearson "
                          f"{fit.val_correlation:.3f}", flush=True)  # fmt: skip
                    grown = SegmentStore.from_state_dict(store.state_dict())
                    grown.extend(held_out)
                    t0 = time.perf_counter()
                    model, fit = fit_resymnet_model(
                        grown, ReSymNetConfig(**keys, warm_start=refit == "warm"), seed=seed + 1,
                        init=model if refit == "warm" else None, layout=layout,
                    )  # fmt: skip
                    wall = time.perf_counter() - t0
                expert = float("nan")
                if held_out is not None:
                    expert = float(
                        pearson_correlation(model.predict(held_out.features), held_out.true_sparse)
                    )
                val_mse = statistics.mean(fit.best_val_loss)
                print(
                    f"{env} {option} seed {seed}: {fit.seconds_per_epoch:.2f} s/epoch, epochs {fit.epochs_run}, "
                    f"best {fit.best_epoch}, wall {wall / 60:.1f} min, val Pearson {fit.val_correlation:.3f}, "
                    f"val sum-MSE {val_mse:.4g}, expert Pearson "
                    + ("—" if held_out is None else f"{expert:.3f}")
                    + f"; CPU {fit.cpu_time_s:.0f} s (training {fit.train_cpu_s:.0f}, validation "
                    f"{fit.validation_cpu_s:.0f}); load={os.getloadavg()[0]:.2f}",
                    flush=True,
                )
                summary.setdefault(option, []).append(
                    (fit.seconds_per_epoch, max(fit.epochs_run), wall, fit.val_correlation, val_mse, expert)
                )
        sum_epoch = next(
            (statistics.mean(r[0] for r in rows) for o, rows in summary.items() if o.startswith("sum")), None
        )
        for option, rows in summary.items():
            mean = [statistics.mean(col) for col in zip(*rows)]
            ratio = f", eq. 1 s/epoch over this {sum_epoch / mean[0]:.2f}x" if sum_epoch else ""
            print(
                f"summary {env} {option} ({len(rows)} seeds): {mean[0]:.2f} s/epoch, {mean[1]:.0f} epochs, wall "
                f"{mean[2] / 60:.1f} min, val Pearson {mean[3]:.3f}, val sum-MSE {mean[4]:.4g}, expert Pearson "
                f"{mean[5]:.3f}{ratio}",
                flush=True,
            )


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
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the fits run")
    parser.add_argument("--long", action="store_true", help="seconds per epoch before/after on ~121k steps")
    parser.add_argument("--rounds", type=int, default=3, help="--long: alternating rounds")
    parser.add_argument("--long-segments", type=int, default=100, help="--long: segments of 975-1000 steps")
    parser.add_argument("--short-segments", type=int, default=1000, help="--long: segments of 8-39 steps")
    parser.add_argument("--stacked", type=int, default=0, help="S: stacked S x K refit vs S fits in sequence")
    parser.add_argument("--memory", action="store_true", help="peak RSS of a fit under glibc malloc settings")
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--quality", action="store_true", help="the fit's options side by side on real stores"
    )
    parser.add_argument(
        "--envs", default="swimmer,halfcheetah,hopper", help="--quality: conf/<env>.yaml names"
    )
    parser.add_argument("--fit-seeds", default="0,1,2", help="--quality: fit seeds")
    parser.add_argument("--options", default="sum@3,randomized,randomized+bc", help="--quality: see above")
    parser.add_argument("--patience", type=int, default=20, help="--quality: early-stopping patience")
    parser.add_argument("--expert-run", default="", help="--quality: ENV=RUN_DIR[,ENV=RUN_DIR]")
    parser.add_argument("--expert-episodes", type=int, default=50, help="--quality: held-out expert episodes")
    parser.add_argument("--stores", default="", help="--quality: folder caching the collected stores")
    args = parser.parse_args()
    if args.quality:
        args.episodes = args.episodes or 1000
        args.epochs = args.epochs or 100
        bench_quality(args)
        return
    if args.memory_child:
        _memory_child(args)
        return
    if args.memory:
        bench_memory(args)
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_reward_fit: --device cuda but CUDA is not available")
    if args.stacked:
        bench_stacked(args)
        return
    if args.long:
        bench_long(args)
        return
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

    def config(k: int) -> ReSymNetConfig:
        return ReSymNetConfig(ensemble_size=k, max_epochs=epochs, patience=epochs + 1)

    # Warm-up (allocator, first-call kernels) so neither arm pays it alone.
    fit_resymnet_model(
        store,
        ReSymNetConfig(ensemble_size=1, max_epochs=1, patience=2, hidden=256),
        seed=99,
        device=args.device,
    )

    t0, c0 = time.perf_counter(), time.process_time()
    batched = fit_resymnet_model(store, config(args.members), seed=args.seed, device=args.device)
    t_batched, c_batched = time.perf_counter() - t0, time.process_time() - c0
    print(
        f"batched K={args.members}: wall {t_batched:.2f}s cpu {c_batched:.2f}s (epochs {batched.summary.epochs_run})"
    )

    t0, c0 = time.perf_counter(), time.process_time()
    for k in range(args.members):
        single = fit_resymnet_model(store, config(1), seed=args.seed + k, device=args.device)
        assert single.summary.epochs_run == [epochs]
    t_seq, c_seq = time.perf_counter() - t0, time.process_time() - c0
    print(f"sequential {args.members} x K=1: wall {t_seq:.2f}s cpu {c_seq:.2f}s")
    # On a shared machine wall time depends on other jobs; this process's CPU time much less so.
    print(f"load_after={os.getloadavg()[0]:.2f} cpu_time_ratio={c_seq / c_batched:.2f}x")
    print(f"speedup_vs_sequential: {t_seq / t_batched:.2f}x")


if __name__ == "__main__":
    main()

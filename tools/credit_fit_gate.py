"""Fit-level gate of ReSymNet's credit options (docs/method.md §4c; no RL): where robots fall, does a candidate
redistribute the hidden channel better than ReSymNet and uniform R/T?

    python tools/credit_fit_gate.py --expert-run hopper=RUN,walker=RUN,swimmer=RUN \\
        [--results docs/results/credit-at-fall] [--random 400 --expert 40] [--long-random 20 --long-expert 10] \\
        [--test-random 100 --test-expert 20 --long-test 5] [--max-epochs 100 --patience 15] [--seed 0]

Settings: mo-hopper-v5 and mo-walker2d-v5 each with the forward channel (0) and the control-cost channel (the
last) sparse, and mo-swimmer-v5 forward; always ``p_rel = 0`` (one release per episode). For each, one store
is collected through the sparse wrapper as the loop's cycle 1 would hold it: ``--random`` uniform-random episodes
and ``--expert`` episodes of a trained policy (``--expert-run ENV=RUN_DIR``: a run whose agent's
``expert_policy`` acts deterministically with a fresh training preference each step, as the loop's expert
collection; swimmer's 1000-step episodes take the ``--long-*`` counts). Held-out episodes (other seeds, never
fitted) are scored separately for the random and the expert policy.

Candidates, each alone:

- ``uniform``: R/T on every step (no fit);
- ``resymnet``: the paper's model (eq. 1, h_t = [s, a, r_dense]);
- ``normalised``: ``reward.loss=normalised`` (eq. 1 / T);
- ``flag``: ``reward.terminal_feature=true`` (h_t gets the termination flag);
- ``conserve``: ``reward.conserve_return=true``: ``resymnet``'s fit (the option changes no fit), each held-out
  episode shifted by ``(R − Σ f) / T``.

Measures on the held-out episodes of a split: ``pearson`` of the per-step shaped value with the true hidden
reward over every step; on the terminating (falling) steps the mean shaped value ``fall_pred``, the mean
true value ``fall_true``, and ``fall_mae`` = mean |shaped − true|; ``sum_mse`` = mean over episodes of
(Σ shaped − R)² (0 for ``uniform`` and ``conserve`` by construction). Writes ``fit_gate.csv`` and
``fit_gate.md`` under ``--results``; every fit is the paper's ReSymNet fit (K = 3, AdamW, patience) with
``--max-epochs`` / ``--patience``, one torch thread.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import torch

from prism.data.collect import collect_episodes, uniform_random_policy
from prism.data.segments import SegmentStore
from prism.envs import get_env_spec, make_env
from prism.reward.config import ReSymNetConfig
from prism.reward.conservation import conserve_segment_returns
from prism.reward.losses import pearson_correlation
from prism.reward.models.resymnet_fit import fit_resymnet_model

SETTINGS = (  # (name, env id, expert key, sparse channel: index or -1 = last, long episodes)
    ("hopper-forward", "mo-hopper-v5", "hopper", 0, False),
    ("hopper-cost", "mo-hopper-v5", "hopper", -1, False),
    ("walker-forward", "mo-walker2d-v5", "walker", 0, False),
    ("walker-cost", "mo-walker2d-v5", "walker", -1, False),
    ("swimmer-forward", "mo-swimmer-v5", "swimmer", 0, True),
)
CANDIDATES = ("uniform", "resymnet", "normalised", "flag", "conserve")
OPTIONS = {"resymnet": {}, "normalised": {"loss": "normalised"}, "flag": {"terminal_feature": True}}
COLUMNS = (
    "setting", "candidate", "split", "episodes", "steps", "falls", "pearson", "fall_pred", "fall_true",
    "fall_mae", "sum_mse", "fit_epochs", "fit_s",
)  # fmt: skip


def collect(env_id: str, channel: int, policy_of, episodes: int, seed: int) -> SegmentStore:
    """``episodes`` episodes through the sparse wrapper (``p_rel = 0``), one policy per episode from
    ``policy_of(seed_e)`` (a fresh preference stream per expert episode, as bench_reward_fit does)."""
    spec = get_env_spec(env_id)
    env = make_env(spec, sparse_channel=channel, p_rel=0.0, seed=seed)
    store = SegmentStore(spec.obs_dim, spec.act_dim, spec.n_objectives - 1)
    for e in range(episodes):
        policy = policy_of(seed + e, env)
        collect_episodes(env, policy, 1, store, channel, seed=seed + e)
    return store


def shaped(candidate: str, model, store: SegmentStore) -> torch.Tensor:
    """Per-step shaped values of every step of ``store`` under ``candidate``."""
    if candidate == "uniform":
        lengths = store.segment_lengths.to(torch.float32)
        return (store.targets / lengths)[store.segment_index]
    pred = model.predict(model.inputs.of_store(store))
    if candidate == "conserve":
        return conserve_segment_returns(pred, store.segment_index, store.targets)
    return pred


def measure(values: torch.Tensor, store: SegmentStore) -> dict:
    """The gate's measures of per-step ``values`` on ``store`` (see the module docstring)."""
    truth = store.true_sparse
    falls = store.terminated_steps
    sums = torch.zeros(store.num_segments, dtype=torch.float64).index_add_(
        0, store.segment_index, values.double()
    )
    out = {
        "episodes": store.num_segments,
        "steps": len(store),
        "falls": int(falls.sum()),
        "pearson": float(pearson_correlation(values.double(), truth.double())),
        "sum_mse": float((sums - store.targets.double()).pow(2).mean()),
        "fall_pred": "",
        "fall_true": "",
        "fall_mae": "",
    }
    if bool(falls.any()):
        out["fall_pred"] = float(values[falls].mean())
        out["fall_true"] = float(truth[falls].mean())
        out["fall_mae"] = float((values[falls] - truth[falls]).abs().mean())
    return out


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def write_markdown(path: Path, rows: list[dict], header: str) -> None:
    lines = [header, ""]
    for split in ("random", "expert"):
        lines += [
            f"### Held-out {split}-policy episodes",
            "",
            "| setting | candidate | Pearson | fall pred | fall true | fall MAE | episode-sum MSE | epochs | fit s |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            if r["split"] == split:
                cells = [r[c] for c in ("setting", "candidate", "pearson", "fall_pred", "fall_true", "fall_mae",
                                        "sum_mse", "fit_epochs", "fit_s")]  # fmt: skip
                lines.append("| " + " | ".join(_fmt(c) for c in cells) + " |")
        lines.append("")
    path.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--expert-run", required=True, help="hopper=RUN_DIR,walker=RUN_DIR,swimmer=RUN_DIR")
    parser.add_argument("--results", default="docs/results/credit-at-fall")
    parser.add_argument("--random", type=int, default=400)
    parser.add_argument("--expert", type=int, default=40)
    parser.add_argument("--long-random", type=int, default=20)
    parser.add_argument("--long-expert", type=int, default=10)
    parser.add_argument("--test-random", type=int, default=100)
    parser.add_argument("--test-expert", type=int, default=20)
    parser.add_argument("--long-test", type=int, default=5)
    parser.add_argument("--max-epochs", type=int, default=100)
    parser.add_argument("--patience", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--settings", default=",".join(s[0] for s in SETTINGS))
    args = parser.parse_args(argv)

    experts = {}
    for pair in args.expert_run.split(","):
        key, sep, run_dir = pair.partition("=")
        if not sep or not Path(run_dir).is_dir():
            print(f"credit_fit_gate: --expert-run: bad entry {pair!r} (want ENV=RUN_DIR, an existing folder)")
            return 2
        experts[key] = run_dir
    wanted = args.settings.split(",")
    known = {s[0] for s in SETTINGS}
    for name in wanted:
        if name not in known:
            print(
                f"credit_fit_gate: --settings: unknown setting {name!r} (known: {', '.join(sorted(known))})"
            )
            return 2
    settings = [s for s in SETTINGS if s[0] in wanted]
    for _, _, key, _, _ in settings:
        if key not in experts:
            print(f"credit_fit_gate: --expert-run: no run for {key!r}")
            return 2
    out_dir = Path(args.results)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)

    from prism.api import load_run

    runs = {key: load_run(path) for key, path in experts.items()}
    rows: list[dict] = []
    start = time.perf_counter()
    for name, env_id, key, channel_arg, long in settings:
        spec = get_env_spec(env_id)
        channel = channel_arg % spec.n_objectives
        run = runs[key]

        def random_policy(seed: int, env) -> object:
            return uniform_random_policy(env.action_space, seed)

        def expert_policy(seed: int, env, run=run) -> object:
            return run.agent.expert_policy(seed=seed)

        n_random, n_expert = (args.long_random, args.long_expert) if long else (args.random, args.expert)
        n_test_r, n_test_e = (
            (args.long_test, args.long_test) if long else (args.test_random, args.test_expert)
        )
        s = args.seed * 1_000_000
        train = collect(env_id, channel, random_policy, n_random, s + 1)
        train.extend(collect(env_id, channel, expert_policy, n_expert, s + 100_000))
        tests = {
            "random": collect(env_id, channel, random_policy, n_test_r, s + 200_000),
            "expert": collect(env_id, channel, expert_policy, n_test_e, s + 300_000),
        }
        print(f"{name}: train {train.num_segments} episodes / {len(train)} steps; "
              + ", ".join(f"test {k} {v.num_segments} / {len(v)}" for k, v in tests.items()), flush=True)  # fmt: skip
        fits = {}
        for cand, options in OPTIONS.items():
            cfg = ReSymNetConfig(max_epochs=args.max_epochs, patience=args.patience, threads=1, **options)
            t0 = time.perf_counter()
            model, summary = fit_resymnet_model(train, cfg, seed=args.seed)
            fits[cand] = (model, max(summary.epochs_run), time.perf_counter() - t0)
            print(f"  {cand}: {fits[cand][1]} epochs, {fits[cand][2]:.0f} s", flush=True)
        fits["conserve"] = fits["resymnet"]
        for cand in CANDIDATES:
            model, epochs, seconds = fits.get(cand, (None, "", ""))
            for split, store in tests.items():
                row = {
                    "setting": name,
                    "candidate": cand,
                    "split": split,
                    **measure(shaped(cand, model, store), store),
                }
                row["fit_epochs"] = epochs if cand in OPTIONS else ""
                row["fit_s"] = round(seconds, 1) if cand in OPTIONS else ""
                rows.append(row)
        with open(out_dir / "fit_gate.csv", "w", newline="") as f:  # rewritten after each setting
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows({k: _fmt(v) for k, v in r.items()} for r in rows)
    sizes = (
        f"Sizes: hopper/walker {args.random} random + {args.expert} expert training episodes, held-out "
        f"{args.test_random} random + {args.test_expert} expert; swimmer {args.long_random} + {args.long_expert}, "
        f"held-out {args.long_test} + {args.long_test}. Fits: K = 3, max {args.max_epochs} epochs, patience "
        f"{args.patience}, seed {args.seed}, 1 thread. Wall {time.perf_counter() - start:.0f} s."
    )
    command = " ".join(["python tools/credit_fit_gate.py", *(sys.argv[1:] if argv is None else argv)])
    header = f"## Fit-level gate (tools/credit_fit_gate.py)\n\nCommand: `{command}`\n\n{sizes}"
    write_markdown(out_dir / "fit_gate.md", rows, header)
    print(f"wrote {out_dir / 'fit_gate.csv'} and {out_dir / 'fit_gate.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

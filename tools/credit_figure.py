"""Shaped against true reward over one mo-walker2d-v5 episode that ends in a fall (the paper's Fig. 4 kind of plot),
for uniform R/T, ReSymNet and ReSymNet with return conservation (docs/method.md §4c; no RL):

    python tools/credit_figure.py [--results docs/results/credit-at-fall] [--random 300] [--test 20] \\
        [--max-epochs 40] [--patience 10] [--seed 0]

For each of walker2d's two channels hidden (forward velocity, then the control cost), as
tools/credit_fit_gate.py does with ``p_rel = 0``: ``--random`` uniform-random episodes are collected through the
sparse wrapper and ReSymNet is fitted on them (the paper's model, K = 3, one thread; conservation changes no fit,
so the same model gives both learned curves). ``--test`` held-out random episodes are collected on other seeds,
and the longest of them is drawn (every random walker2d episode ends in a fall: the env terminates it). The
held-out episodes are the same for both channels (same seeds, same random actions).

Writes ``credit_at_fall.png``, its values ``credit_at_fall.csv`` (setting, step, true, uniform, resymnet,
conserve, terminated) and ``credit_at_fall.md`` (the command, the episode and each curve's sum and fall-step
value) under ``--results``.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import torch
from credit_fit_gate import collect, shaped

from prism.data.collect import uniform_random_policy
from prism.envs import get_env_spec
from prism.reward.config import ReSymNetConfig
from prism.reward.models.resymnet_fit import fit_resymnet_model

ENV_ID = "mo-walker2d-v5"
SETTINGS = (("forward velocity hidden", 0), ("control cost hidden", -1))
CURVES = (  # (column, legend, colour, line style)
    ("uniform", "uniform R/T", "0.45", "--"),
    ("resymnet", "ReSymNet", "tab:blue", "-"),
    ("conserve", "ReSymNet + conservation", "tab:orange", "-"),
)


def _random_policy(seed: int, env) -> object:
    return uniform_random_policy(env.action_space, seed)


def episode_curves(args: argparse.Namespace, channel: int) -> dict[str, list[float]]:
    """The drawn episode's true hidden reward and each candidate's shaped value, step by step."""
    channel %= get_env_spec(ENV_ID).n_objectives  # -1: the last channel
    s = args.seed * 1_000_000
    train = collect(ENV_ID, channel, _random_policy, args.random, s + 1)
    test = collect(ENV_ID, channel, _random_policy, args.test, s + 200_000)
    cfg = ReSymNetConfig(max_epochs=args.max_epochs, patience=args.patience, threads=1)
    model, _ = fit_resymnet_model(train, cfg, seed=args.seed)
    longest = int(torch.argmax(test.segment_lengths))
    steps = test.segment_index == longest
    curves = {"true": test.true_sparse[steps].tolist(), "terminated": test.terminated_steps[steps].tolist()}
    if not curves["terminated"][-1]:
        raise RuntimeError(
            f"the longest held-out episode ({len(curves['true'])} steps) did not end in a fall"
        )
    for name, *_ in CURVES:
        curves[name] = shaped(name, model, test)[steps].tolist()
    return curves


def draw(path: Path, panels: list[tuple[str, dict[str, list[float]]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 3.4 * len(panels)), sharex=True)
    for ax, (title, curves) in zip(axes, panels):
        steps = range(len(curves["true"]))
        ax.plot(steps, curves["true"], color="black", lw=2.2, label=f"true (R = {sum(curves['true']):.2f})")
        for name, legend, colour, style in CURVES:
            ax.plot(
                steps,
                curves[name],
                color=colour,
                ls=style,
                lw=1.6,
                label=f"{legend} (Σ = {sum(curves[name]):.2f})",
            )
        for t, fell in enumerate(curves["terminated"]):
            if fell:
                ax.axvline(t, color="tab:red", ls=":", lw=1.4)
                ax.annotate("fall", (t, ax.get_ylim()[1]), color="tab:red", ha="right", va="top",
                            xytext=(-4, -4), textcoords="offset points")  # fmt: skip
        ax.axhline(0.0, color="0.85", lw=0.8, zorder=0)
        ax.set_title(f"mo-walker2d-v5, {title}: one held-out random-policy episode", fontsize=10)
        ax.set_ylabel("reward of the hidden channel")
        # outside the axes, so that no curve is hidden behind it
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results", default="docs/results/credit-at-fall")
    parser.add_argument("--random", type=int, default=300)
    parser.add_argument("--test", type=int, default=20)
    parser.add_argument("--max-epochs", type=int, default=40)
    parser.add_argument("--patience", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for key in ("random", "test", "max_epochs", "patience"):
        if getattr(args, key) < 1:
            print(f"credit_figure: --{key.replace('_', '-')}: must be at least 1, got {getattr(args, key)}")
            return 2
    out_dir = Path(args.results)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    start = time.perf_counter()
    panels = [(title, episode_curves(args, channel)) for title, channel in SETTINGS]

    columns = ("setting", "step", "true", "uniform", "resymnet", "conserve", "terminated")
    with open(out_dir / "credit_at_fall.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for title, curves in panels:
            for t in range(len(curves["true"])):
                writer.writerow(
                    [title, t, *(f"{curves[c][t]:.6g}" for c in columns[2:6]), int(curves["terminated"][t])]
                )
    draw(out_dir / "credit_at_fall.png", panels)

    command = " ".join(["python tools/credit_figure.py", *(sys.argv[1:] if argv is None else argv)])
    lines = [
        "## Shaped against true reward over one walker2d episode that ends in a fall (tools/credit_figure.py)",
        "",
        f"Command: `{command}`",
        "",
        f"ReSymNet fitted on {args.random} random-policy episodes (K = 3, max {args.max_epochs} epochs, patience "
        f"{args.patience}, seed {args.seed}, 1 thread); the longest of {args.test} held-out random-policy "
        f"episodes drawn. Wall {time.perf_counter() - start:.0f} s.",
        "",
        "| hidden channel | steps | R | Σ uniform | Σ ReSymNet | Σ conservation | fall: true | uniform | ReSymNet | conservation |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for title, curves in panels:
        sums = [sum(curves[c]) for c in ("true", "uniform", "resymnet", "conserve")]
        fall = [curves[c][-1] for c in ("true", "uniform", "resymnet", "conserve")]
        cells = [title, str(len(curves["true"])), *(f"{v:.3f}" for v in sums + fall)]
        lines.append("| " + " | ".join(cells) + " |")
    (out_dir / "credit_at_fall.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out_dir / 'credit_at_fall.png'}, credit_at_fall.csv and credit_at_fall.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Reproduce the paper's tables: a grid of envs × methods × seeds, one ``prism fit`` process per run.

    python tools/reproduce.py --preset cpu-small --parallel 2            # run (or resume) the grid, then report
    python tools/reproduce.py --preset cpu-small --report-only           # tables and plots from finished runs
    python tools/reproduce.py --preset paper --envs hopper --seeds 0 1   # any sub-grid

Each run lives in ``<out>/<env>/<method>/seed<k>`` and is a plain prism run folder. The grid is resumable:
finished runs (``summary.json`` present) are skipped, interrupted ones are continued with ``--resume``.
The report (markdown + CSV) gives mean ± standard error over seeds of the final and the best evaluation per
(env, method, metric), the paper's number beside each cell, and the ratios PRISM / baseline and PRISM / oracle;
plots show Pareto fronts (one panel per env) and HV curves with a standard-error band.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
PAPER = Path(__file__).resolve().parent / "data" / "paper_results.csv"

ENV_FILES = {
    "hopper": "mo-hopper-v5",
    "walker": "mo-walker2d-v5",
    "halfcheetah": "mo-halfcheetah-v5",
    "swimmer": "mo-swimmer-v5",
}
# method name -> (overlay file, the paper's column header in the main / ablation tables)
METHODS = {
    "oracle": ("method/oracle.yaml", "Oracle"),
    "baseline": ("method/baseline.yaml", "Baseline"),
    "prism": ("method/prism.yaml", "PRISM"),
    "wo_residual": ("ablation/wo_residual.yaml", "w/o residual"),
    "wo_dense": ("ablation/wo_dense.yaml", "w/o dense rewards"),
    "wo_ensemble": ("ablation/wo_ensemble.yaml", "w/o ensemble"),
    "wo_refinement": ("ablation/wo_refinement.yaml", "w/o refinement"),
    "wo_loss": ("ablation/wo_loss.yaml", "w/o loss"),
    "uniform": ("ablation/uniform.yaml", "uniform"),
    "random": ("ablation/random.yaml", "random"),
}
METRICS = ("hv", "eum", "vo")


@dataclass(frozen=True)
class Preset:
    envs: tuple[str, ...]
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    overrides: tuple[str, ...]
    description: str
    env_overrides: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Per-env additions to ``overrides`` (e.g. smaller collections where episodes are 1000 steps long)."""

    def overrides_for(self, env: str) -> tuple[str, ...]:
        return self.overrides + dict(self.env_overrides).get(env, ())


PRESETS = {
    "paper": Preset(
        envs=tuple(ENV_FILES),
        methods=tuple(METHODS),
        seeds=tuple(range(10)),
        overrides=(),
        description="The paper's full settings (conf/<env>.yaml as shipped), 10 seeds.",
    ),
    "cpu-small": Preset(
        envs=("hopper", "swimmer"),
        methods=("oracle", "baseline", "prism"),
        seeds=tuple(range(5)),
        overrides=(
            "loop.cycles=2",
            "loop.steps_per_cycle=5000",
            "loop.checkpoint_every=2500",
            "reward.max_epochs=40",
            "agent.learning_starts=1000",
            "agent.buffer_size=100000",
            "eval.every=2500",
            "eval.num_weights=10",
            "eval.episodes=2",
        ),
        env_overrides=(
            ("hopper", ("loop.initial_episodes=100", "loop.expert_episodes=20")),
            # Swimmer episodes always last 1000 steps: 10 random + 5 expert episodes are already 15 000
            # reward-model training steps (ReSymNet fits are the dominant cost of a PRISM run on CPU).
            ("swimmer", ("loop.initial_episodes=10", "loop.expert_episodes=5")),
        ),
        description=(
            "mo-hopper-v5 and mo-swimmer-v5, oracle / baseline / PRISM, 5 seeds. Every method gets the same "
            "10 000 RL env steps (2 cycles × 5 000; learning starts at 1 000). PRISM collects 100 random + 20 "
            "expert episodes on hopper and 10 + 5 on swimmer, and fits ReSymNet (K = 3, hidden 256) for at most "
            "40 epochs (patience 20). Evaluation every 2 500 steps on 10 weights × 2 episodes (γ = 0.99), "
            "not the paper's 100 × 5. About 1/20 of the paper's RL budget."
        ),
    ),
}


@dataclass(frozen=True)
class Cell:
    env: str
    method: str
    seed: int

    def run_dir(self, out: Path) -> Path:
        return out / self.env / self.method / f"seed{self.seed}"


def fit_command(cell: Cell, preset: Preset, out: Path) -> list[str]:
    run_dir = cell.run_dir(out)
    if (run_dir / "config.yaml").is_file():
        return [sys.executable, "-m", "prism.cli", "fit", "--resume", str(run_dir)]
    return [
        sys.executable,
        "-m",
        "prism.cli",
        "fit",
        "--config",
        str(CONF / f"{cell.env}.yaml"),
        str(CONF / METHODS[cell.method][0]),
        *preset.overrides_for(cell.env),
        f"seed={cell.seed}",
        f"run_dir={run_dir}",
    ]


def run_cell(cell: Cell, preset: Preset, out: Path) -> tuple[Cell, int, float]:
    run_dir = cell.run_dir(out)
    if (run_dir / "summary.json").is_file():
        return cell, 0, 0.0
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log = run_dir.parent / f"seed{cell.seed}.log"
    start = time.perf_counter()
    with log.open("a") as fh:
        fh.write(f"\n$ {' '.join(fit_command(cell, preset, out))}\n")
        fh.flush()
        code = subprocess.call(
            fit_command(cell, preset, out),
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    return cell, code, time.perf_counter() - start


# ---- collection and statistics -----------------------------------------------------------------------------
def read_eval(run_dir: Path) -> list[dict[str, float]]:
    with (run_dir / "eval.csv").open(newline="") as fh:
        return [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(fh)]


def mean_se(values: list[float]) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n == 1:
        return mean, math.nan
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def paper_values() -> dict[tuple[str, str, str], tuple[float, float]]:
    """(env id, paper method header, metric) -> (raw mean, raw err) from the main and ablation tables."""
    out: dict[tuple[str, str, str], tuple[float, float]] = {}
    with PAPER.open() as fh:
        rows = csv.DictReader(line for line in fh if not line.startswith("#"))
        for row in rows:
            if row["table"] not in ("main", "ablation", "ablation2"):
                continue
            scale = float(row["scale"])
            out.setdefault(
                (row["env"], row["method"], row["metric"].lower()),
                (float(row["mean"]) * scale, float(row["err"]) * scale),
            )
    return out


def collect(cells: list[Cell], out: Path) -> dict[tuple[str, str], dict[str, list]]:
    """Per (env, method): final and best values per metric (one per finished seed), and the HV curves."""
    table: dict[tuple[str, str], dict[str, list]] = {}
    for cell in cells:
        run_dir = cell.run_dir(out)
        if not (run_dir / "summary.json").is_file():
            continue
        rows = read_eval(run_dir)
        entry = table.setdefault((cell.env, cell.method), {"seeds": [], "curves": []})
        entry["seeds"].append(cell.seed)
        for metric in METRICS:
            entry.setdefault(f"final_{metric}", []).append(rows[-1][metric])
            entry.setdefault(f"best_{metric}", []).append(max(r[metric] for r in rows))
        entry["curves"].append([(r["env_steps"], r["hv"]) for r in rows])
    return table


def _fmt(mean: float, se: float) -> str:
    if math.isnan(mean):
        return "—"
    scale = max(abs(mean), 1e-12)
    exponent = int(math.floor(math.log10(scale))) if scale >= 1e4 else 0
    if exponent:
        return f"{mean / 10**exponent:.2f} ± {se / 10**exponent:.2f} e{exponent}"
    return f"{mean:.2f} ± {se:.2f}" if not math.isnan(se) else f"{mean:.2f}"


def write_report(preset_name: str, cells: list[Cell], out: Path, results: Path) -> str:
    preset = PRESETS[preset_name]
    table = collect(cells, out)
    paper = paper_values()
    results.mkdir(parents=True, exist_ok=True)
    csv_rows = []
    lines = [
        "| env | method | n | metric | final (mean ± SE) | best (mean ± SE) | paper (mean ± SE) |",
        "|---|---|---|---|---|---|---|",
    ]
    for env in preset.envs:
        env_id = ENV_FILES[env]
        for method in preset.methods:
            entry = table.get((env, method))
            for metric in METRICS:
                final = mean_se(entry[f"final_{metric}"]) if entry else (math.nan, math.nan)
                best = mean_se(entry[f"best_{metric}"]) if entry else (math.nan, math.nan)
                ref = paper.get((env_id, METHODS[method][1], metric), (math.nan, math.nan))
                n = len(entry["seeds"]) if entry else 0
                lines.append(
                    f"| {env_id} | {method} | {n} | {metric.upper()} | {_fmt(*final)} | {_fmt(*best)} | {_fmt(*ref)} |"
                )
                csv_rows.append(
                    {
                        "env": env_id,
                        "method": method,
                        "metric": metric,
                        "n_seeds": n,
                        "final_mean": final[0],
                        "final_se": final[1],
                        "best_mean": best[0],
                        "best_se": best[1],
                        "paper_mean": ref[0],
                        "paper_se": ref[1],
                    }
                )
    ratio_lines = [
        "| env | metric | PRISM / baseline (ours) | (paper) | PRISM / oracle (ours) | (paper) |",
        "|---|---|---|---|---|---|",
    ]

    def ours(env: str, method: str, metric: str) -> float:
        entry = table.get((env, method))
        return mean_se(entry[f"final_{metric}"])[0] if entry else math.nan

    def theirs(env_id: str, method: str, metric: str) -> float:
        return paper.get((env_id, METHODS[method][1], metric), (math.nan, math.nan))[0]

    def ratio(a: float, b: float) -> str:
        return "—" if math.isnan(a) or math.isnan(b) or b == 0 else f"{a / b:.2f}"

    for env in preset.envs:
        env_id = ENV_FILES[env]
        for metric in METRICS:
            ratio_lines.append(
                f"| {env_id} | {metric.upper()} | {ratio(ours(env, 'prism', metric), ours(env, 'baseline', metric))} | "
                f"{ratio(theirs(env_id, 'prism', metric), theirs(env_id, 'baseline', metric))} | "
                f"{ratio(ours(env, 'prism', metric), ours(env, 'oracle', metric))} | "
                f"{ratio(theirs(env_id, 'prism', metric), theirs(env_id, 'oracle', metric))} |"
            )
    with (results / "table.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(csv_rows[0]))
        writer.writeheader()
        writer.writerows(csv_rows)
    markdown = "\n".join(
        [
            f"## {preset_name}: {preset.description}",
            "",
            *lines,
            "",
            "Ratios of final means (a ratio of negative or near-zero values is not meaningful):",
            "",
            *ratio_lines,
            "",
        ]
    )
    (results / "table.md").write_text(markdown)
    plot(preset, table, out, cells, results)
    return markdown


def plot(preset: Preset, table, out: Path, cells: list[Cell], results: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    colours = {"oracle": "tab:green", "baseline": "tab:red", "prism": "tab:blue"}
    # HV curves with a standard-error band.
    fig, axes = plt.subplots(1, len(preset.envs), figsize=(5 * len(preset.envs), 3.6), squeeze=False)
    for ax, env in zip(axes[0], preset.envs):
        for method in preset.methods:
            entry = table.get((env, method))
            if not entry:
                continue
            steps = [s for s, _ in entry["curves"][0]]
            n = min(len(c) for c in entry["curves"])
            values = np.array([[v for _, v in c[:n]] for c in entry["curves"]])
            mean = values.mean(0)
            se = values.std(0, ddof=1) / np.sqrt(len(values)) if len(values) > 1 else np.zeros_like(mean)
            ax.plot(steps[:n], mean, label=method, color=colours.get(method))
            ax.fill_between(steps[:n], mean - se, mean + se, alpha=0.25, color=colours.get(method))
        ax.set_title(ENV_FILES[env])
        ax.set_xlabel("env steps")
        ax.set_ylabel("HV")
        ax.legend()
    fig.tight_layout()
    fig.savefig(results / "hv_curves.png", dpi=120)
    plt.close(fig)
    # Final Pareto fronts of every seed (undominated points of each run's final evaluation).
    fig, axes = plt.subplots(1, len(preset.envs), figsize=(5 * len(preset.envs), 3.8), squeeze=False)
    for ax, env in zip(axes[0], preset.envs):
        for method in preset.methods:
            first = True
            for cell in cells:
                front = cell.run_dir(out) / "front.csv"
                if cell.env != env or cell.method != method or not front.is_file():
                    continue
                with front.open(newline="") as fh:
                    rows = [r for r in csv.DictReader(fh) if r["on_front"] == "1"]
                pts = np.array([[float(r["mean_0"]), float(r["mean_1"])] for r in rows])
                # With 3+ objectives the front's projection on (0, 1) is not a curve: points only.
                style = "o-" if rows and "mean_2" not in rows[0] else "o"
                if len(pts):
                    pts = pts[np.argsort(pts[:, 0])]
                    ax.plot(
                        pts[:, 0],
                        pts[:, 1],
                        style,
                        ms=3,
                        lw=0.8,
                        alpha=0.6,
                        color=colours.get(method),
                        label=method if first else None,
                    )
                    first = False
        ax.set_title(f"{ENV_FILES[env]}: final fronts of every seed (objectives 0, 1)", fontsize=9)
        ax.set_xlabel("discounted return, objective 0")
        ax.set_ylabel("discounted return, objective 1")
        ax.legend()
    fig.tight_layout()
    fig.savefig(results / "pareto_fronts.png", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu-small")
    parser.add_argument("--parallel", type=int, default=2, help="runs at once (local process pool)")
    parser.add_argument("--out", type=Path, help="grid folder (default runs/reproduce/<preset>)")
    parser.add_argument("--results", type=Path, help="report folder (default docs/results/<preset>)")
    parser.add_argument("--envs", nargs="+", choices=sorted(ENV_FILES))
    parser.add_argument("--methods", nargs="+", choices=sorted(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int)
    parser.add_argument("--report-only", action="store_true", help="only collect finished runs and report")
    parser.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    args = parser.parse_args(argv)

    base = PRESETS[args.preset]
    preset = Preset(
        envs=tuple(args.envs or base.envs),
        methods=tuple(args.methods or base.methods),
        seeds=tuple(args.seeds if args.seeds is not None else base.seeds),
        overrides=base.overrides,
        description=base.description,
        env_overrides=base.env_overrides,
    )
    PRESETS[args.preset] = preset
    out = args.out or ROOT / "runs" / "reproduce" / args.preset
    results = args.results or ROOT / "docs" / "results" / args.preset
    cells = [Cell(e, m, s) for s in preset.seeds for e in preset.envs for m in preset.methods]
    if args.dry_run:
        for cell in cells:
            print(" ".join(fit_command(cell, preset, out)))
        return 0
    start = time.perf_counter()
    failures = 0
    if not args.report_only:
        with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
            for cell, code, seconds in pool.map(lambda c: run_cell(c, preset, out), cells):
                status = (
                    "ok"
                    if code == 0
                    else f"FAILED (exit {code}; see {cell.run_dir(out).parent}/seed{cell.seed}.log)"
                )
                print(
                    f"{cell.env:12s} {cell.method:10s} seed {cell.seed}: {status} {seconds:.0f}s", flush=True
                )
                failures += code != 0
    wall = time.perf_counter() - start
    print(write_report(args.preset, cells, out, results))
    print(f"grid wall time: {wall / 60:.1f} min; failed runs: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

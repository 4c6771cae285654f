"""The report's figures: HV curves with a standard-error band and the final Pareto fronts of every seed (one
panel per env), and the rliable aggregate (IQM and probability of improvement with their CIs)."""

from __future__ import annotations

import csv
from pathlib import Path

from prism.experiments.grid import ENV_FILES, Cell, Preset
from prism.experiments.stats import AggregateResult
from prism.experiments.tables import Table


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def objective_name(column: str) -> str:
    """The objective a front.csv mean-return column is about: ``discounted_return_mean_forward`` → ``forward``
    (the env's name for it, as TensorBoard's front figure shows); ``mean_<i>`` of older files → ``objective <i>``."""
    if column.startswith("discounted_return_mean_"):
        return column.removeprefix("discounted_return_mean_")
    return f"objective {column.removeprefix('mean_')}"


def plot(preset: Preset, table: Table, out: Path, cells: list[Cell], results: Path) -> None:
    """``hv_curves.png`` and ``pareto_fronts.png`` in ``results`` (each env's own arms only)."""
    import numpy as np

    plt = _pyplot()

    base_colours = {"oracle": "tab:green", "baseline": "tab:red", "prism": "tab:blue"}
    # The plain methods keep their colours; other arms (e.g. the protocol study's) take the default cycle.
    # The default cycle has 10 colours: beyond 7 extra arms they would repeat, so larger presets use tab20.
    cycle = (
        [f"C{3 + i}" for i in range(7)] if len(preset.methods) <= 7 else list(plt.get_cmap("tab20").colors)
    )
    colours = {m: base_colours.get(m, cycle[i % len(cycle)]) for i, m in enumerate(preset.methods)}
    many = len(preset.methods) > 4  # a legend inside the axes would hide curves: put it to the right
    width = 5 * len(preset.envs) + (1.8 if many else 0)

    def add_legend(ax) -> None:
        if not ax.get_legend_handles_labels()[0]:
            return
        if many:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        else:
            ax.legend()

    # HV curves with a standard-error band.
    fig, axes = plt.subplots(1, len(preset.envs), figsize=(width, 3.6), squeeze=False)
    for ax, env in zip(axes[0], preset.envs):
        names: list[str] = []  # the env's objectives, read off its first front.csv
        for method in preset.methods_for(env):
            entry = table.get((env, method))
            if not entry:
                continue
            steps = [s for s, _ in entry["curves"][0]]
            n = min(len(c) for c in entry["curves"])
            values = np.array([[v for _, v in c[:n]] for c in entry["curves"]])
            mean = values.mean(0)
            se = values.std(0, ddof=1) / np.sqrt(len(values)) if len(values) > 1 else np.zeros_like(mean)
            style = "--" if preset.protocol_of(method) == "released" else "-"
            # Lines above every band: drawn in order, later bands would wash out earlier arms' lines.
            ax.plot(steps[:n], mean, style, label=method, color=colours.get(method), zorder=3)
            band_alpha = 0.12 if many else 0.25
            ax.fill_between(
                steps[:n], mean - se, mean + se, alpha=band_alpha, color=colours.get(method), zorder=1
            )
        ax.set_title(ENV_FILES[env])
        ax.set_xlabel("env steps")
        ax.set_ylabel("HV")
        add_legend(ax)
    fig.tight_layout()
    fig.savefig(results / "hv_curves.png", dpi=120)
    plt.close(fig)
    # Final Pareto fronts of every seed (undominated points of each run's final evaluation).
    fig, axes = plt.subplots(1, len(preset.envs), figsize=(width, 3.8), squeeze=False)
    for ax, env in zip(axes[0], preset.envs):
        names: list[str] = []  # the env's objectives, read off its first front.csv
        for method in preset.methods_for(env):
            first = True
            for cell in cells:
                front = cell.run_dir(out) / "front.csv"
                if cell.env != env or cell.method != method or not front.is_file():
                    continue
                with front.open(newline="") as fh:
                    rows = [r for r in csv.DictReader(fh) if r["on_front"] == "1"]
                # front.csv's mean-return columns: discounted_return_mean_<objective> (mean_<i> before)
                means = [
                    c for c in (rows[0] if rows else {}) if c.startswith(("discounted_return_mean_", "mean_"))
                ]
                names = names or [objective_name(c) for c in means[:2]]
                pts = np.array([[float(r[c]) for c in means[:2]] for r in rows])
                # With 3+ objectives the front's projection on (0, 1) is not a curve: points only.
                style = "o-" if len(means) == 2 else "o"
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
        x_name, y_name = (names + ["objective 0", "objective 1"][len(names) :])[:2]
        ax.set_title(f"{ENV_FILES[env]}: final fronts of every seed ({x_name}, {y_name})", fontsize=9)
        ax.set_xlabel(f"discounted return, {x_name}")
        ax.set_ylabel(f"discounted return, {y_name}")
        add_legend(ax)
    fig.tight_layout()
    fig.savefig(results / "pareto_fronts.png", dpi=120)
    plt.close(fig)


def plot_aggregate(result: AggregateResult, normaliser: str, path: Path) -> None:
    """The rliable aggregate as a figure: IQM of normalised final HV per arm, and P(X > Y) per pair, each a
    point with its stratified-bootstrap 95 % CI."""
    plt = _pyplot()
    arms, pairs = list(result.iqm), list(result.improvement)
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.5 + 0.45 * max(len(arms), len(pairs), 2)), squeeze=False)
    panels = (
        (axes[0][0], arms, [result.iqm[a] for a in arms], f"IQM of final HV / mean {normaliser} HV", 1.0),
        (
            axes[0][1],
            [f"P({x} > {y})" for x, y in pairs],
            [result.improvement[p] for p in pairs],
            "P(X > Y)",
            0.5,
        ),
    )
    for ax, labels, intervals, xlabel, reference in panels:
        for row, interval in enumerate(intervals):
            ax.plot([interval.low, interval.high], [row, row], color="tab:blue", lw=6, alpha=0.35)
            ax.plot([interval.value], [row], "o", color="tab:blue")
        ax.axvline(reference, color="grey", ls="--", lw=0.8)
        ax.set_yticks(range(len(labels)), labels)
        ax.set_ylim(-0.7, len(labels) - 0.3)
        ax.invert_yaxis()
        ax.set_xlabel(xlabel)
    envs = ", ".join(ENV_FILES.get(e, e) for e in result.envs)
    fig.suptitle(f"rliable aggregate over {envs} (stratified bootstrap 95% CIs)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_objective_curves(preset: Preset, table: Table, results: Path) -> None:
    """``<objective>_curves.png``: the take-off objective's mean undiscounted return along the periodic
    evaluations of each arm of the take-off env (mean ± SE over seeds), with the take-off threshold."""
    import numpy as np

    spec = preset.take_off
    plt = _pyplot()
    key = f"undiscounted_return_{spec.objective}"
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for i, arm in enumerate(preset.methods_for(spec.env)):
        entry = table.get((spec.env, arm))
        if not entry or not entry.get("periodic_returns"):
            continue
        curves = [c for c in entry["periodic_returns"] if c and key in c[0]]
        if not curves:
            continue
        n = min(len(c) for c in curves)
        steps = [r["env_steps"] for r in curves[0][:n]]
        values = np.array([[r[key] for r in c[:n]] for c in curves])
        mean = values.mean(0)
        se = values.std(0, ddof=1) / np.sqrt(len(values)) if len(values) > 1 else np.zeros_like(mean)
        ax.plot(steps, mean, label=f"{arm} ({len(values)} seeds)", color=f"C{i}", zorder=3)
        ax.fill_between(steps, mean - se, mean + se, alpha=0.2, color=f"C{i}", zorder=1)
    ax.axhline(spec.threshold, ls=":", color="grey", lw=1, label=f"take-off ({spec.threshold:g})")
    ax.set_title(
        f"{ENV_FILES[spec.env]}: undiscounted {spec.objective} return (periodic evaluations)", fontsize=9
    )
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"undiscounted {spec.objective} return")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(results / f"{spec.objective}_curves.png", dpi=120)
    plt.close(fig)

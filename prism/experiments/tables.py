"""The report's per-env tables, each as markdown lines and (where the report keeps one) CSV rows: the arm table
beside the paper's numbers and the per-objective returns and episode lengths (the ratio table, with its tests,
is :mod:`prism.experiments.ratios`).

Only the arms an env runs (:meth:`~prism.experiments.grid.Preset.methods_for`) get rows there; a joined arm's
rows say where its runs come from.
"""

from __future__ import annotations

import math

from prism.experiments.grid import ENV_FILES, HEALTHY_BONUS_ENVS, METHODS, METRICS, Preset
from prism.experiments.stats import mean_se

Table = dict[tuple[str, str], dict[str, list]]
"""What :func:`prism.experiments.collect.collect` returns: per (env, arm) the per-seed values."""
PaperValues = dict[tuple[str, str, str], tuple[float, float]]


def fmt(mean: float, se: float) -> str:
    """``mean ± se`` with two decimals (a common power of ten for large values; "—" for no value)."""
    if math.isnan(mean):
        return "—"
    scale = max(abs(mean), 1e-12)
    exponent = int(math.floor(math.log10(scale))) if scale >= 1e4 else 0
    if exponent:
        if math.isnan(se):
            return f"{mean / 10**exponent:.2f} e{exponent}"
        return f"{mean / 10**exponent:.2f} ± {se / 10**exponent:.2f} e{exponent}"
    return f"{mean:.2f} ± {se:.2f}" if not math.isnan(se) else f"{mean:.2f}"


def arm_label(preset: Preset, env: str, arm: str) -> str:
    """The arm's name in markdown: a joined arm says whose runs it reads (``e-oracle ← protocol-study``)."""
    join = preset.joined_source(env, arm)
    if join is None:
        return arm
    source = join.source_arm(arm)
    return f"{arm} ← {join.label}" + (f" {source}" if source != arm else "")


def arm_table(preset: Preset, table: Table, paper: PaperValues) -> tuple[list[str], list[dict]]:
    """Per env, arm and metric: final and best periodic mean ± SE over seeds, the paper's value beside them."""
    joins = bool(preset.joined)
    lines = [
        "| env | method | protocol | n | env steps | metric | final (mean ± SE) | best periodic (mean ± SE) "
        "| paper (mean ± SE) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows = []
    for env in preset.envs:
        env_id = ENV_FILES[env]
        for method in preset.methods_for(env):
            entry = table.get((env, method))
            steps = int(sum(entry["env_steps"]) / len(entry["env_steps"])) if entry else 0
            for metric in METRICS:
                final = mean_se(entry[f"final_{metric}"]) if entry else (math.nan, math.nan)
                best = mean_se(entry[f"best_{metric}"]) if entry else (math.nan, math.nan)
                ref = (math.nan, math.nan)
                if preset.paper_counterpart(env, method):
                    ref = paper.get((env_id, METHODS[preset.arm(method).method][1], metric), ref)
                n = len(entry["seeds"]) if entry else 0
                protocol = preset.protocol_of(method)
                lines.append(
                    f"| {env_id} | {arm_label(preset, env, method)} | {protocol} | {n} | {steps} "
                    f"| {metric.upper()} | {fmt(*final)} | {fmt(*best)} | {fmt(*ref)} |"
                )
                row = {
                    "env": env_id,
                    "method": method,
                    "protocol": protocol,
                    "metric": metric,
                    "n_seeds": n,
                    "env_steps": steps,
                    "final_mean": final[0],
                    "final_se": final[1],
                    "best_mean": best[0],
                    "best_se": best[1],
                    "paper_mean": ref[0],
                    "paper_se": ref[1],
                }
                if (
                    joins
                ):  # only presets that join arms have the column (older reports' CSVs stay as they are)
                    join = preset.joined_source(env, method)
                    row["runs_from"] = join.label if join else ""
                rows.append(row)
    return lines, rows


def thin_ratio_note(preset: Preset, table: Table) -> list[str]:
    """Why ratio rows read "—" when an arm they compare has fewer than 2 finished seeds (a one-seed grid such
    as the ``smoke`` preset): a markdown note naming those arms, or ``[]`` when every compared arm has 2+."""
    thin: dict[tuple[str, str], int] = {}
    for env in preset.envs:
        arms = preset.methods_for(env)
        for ratio in preset.ratio_rows():
            for arm in (ratio.numerator, ratio.denominator):
                if ratio.numerator in arms and ratio.denominator in arms:
                    n = len((table.get((env, arm)) or {}).get("final_hv", []))
                    if n < 2:
                        thin[(env, arm)] = n
    if not thin:
        return []
    named = ", ".join(f"{ENV_FILES[env]} {arm} ({n})" for (env, arm), n in thin.items())
    one_seed = (
        " The grid runs one seed per arm: its numbers check a set-up, they compare nothing."
        if len(preset.seeds) < 2
        else ""
    )
    return [
        "",
        "— in a row: an arm it compares has fewer than 2 finished seeds, and the ratio of means, its bootstrap "
        f"CI and Welch's p need at least 2 per arm (`ratios.csv` holds NaN there). Finished seeds: {named}."
        + one_seed,
    ]


def objective_table(preset: Preset, table: Table) -> list[str]:
    """Markdown rows: per arm, the final evaluation's mean episode length and per-objective returns."""
    lines: list[str] = []
    for env in preset.envs:
        names: list[str] = []  # objectives differ between envs: one table per env
        for method in preset.methods_for(env):
            for key in table.get((env, method), {}):
                if key.startswith("final_return_") and key[len("final_return_") :] not in names:
                    names.append(key[len("final_return_") :])
        if not names:
            continue
        header = ["env", "method", "protocol", "n", "episode length"]
        header += [f"{n} (disc.)" for n in names] + [f"{n} (undisc.)" for n in names]
        net_of_survival = env in HEALTHY_BONUS_ENVS
        if net_of_survival:
            header += [f"{n} (undisc. − length)" for n in names]
        if lines:
            lines.append("")
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for method in preset.methods_for(env):
            entry = table.get((env, method))
            if not entry:
                continue
            lengths = entry.get("final_mean_episode_length", [])
            cells = [ENV_FILES[env], arm_label(preset, env, method), preset.protocol_of(method)]
            cells += [str(len(entry["seeds"])), fmt(*mean_se(lengths))]
            cells += [fmt(*mean_se(entry.get(f"final_return_{n}", []))) for n in names]
            cells += [fmt(*mean_se(entry.get(f"final_undiscounted_return_{n}", []))) for n in names]
            for n in names if net_of_survival else ():
                undiscounted = entry.get(f"final_undiscounted_return_{n}", [])
                net = (
                    [u - length for u, length in zip(undiscounted, lengths)]
                    if len(lengths) == len(undiscounted)
                    else []
                )
                cells.append(fmt(*mean_se(net)))
            lines.append("| " + " | ".join(cells) + " |")
    return lines or ["(no per-objective returns in these eval.csv files)"]

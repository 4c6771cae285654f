"""The report's sweep sections: a metric against a swept config key (:class:`~prism.experiments.grid.Sweep`).

For each sweep, per env and series, three tables and one figure:

- **Levels.** Each level's arm's mean final value per metric with its 95 % t interval over seeds
  (mean ± t₀.₉₇₅,ₙ₋₁ · SE), beside the ``reference`` arm's (e.g. the dense oracle).
- **Comparisons.** The HV row of the study's own ratio table (:mod:`prism.experiments.ratios`) for each level's
  arm over the series' ``versus`` arm: the ratio, its Welch–Fieller interval, 1 − ratio (the drop, its interval
  mirrored), the TOST p at the study's margin and the row's verdict; no new statistics. Where the series has a
  ``band`` (a range a claim gives), whether the interval lies inside it, outside it, or overlaps it.
- **Segment store.** For arms that fit a reward model, per refinement cycle: the store's segments per episode
  (``summary.json`` ``reward_fits[].store``: segments / episodes, 1 when nothing is released inside an episode)
  and the fit's per-step Pearson on held-out segments (``validation.pearson``), mean ± SE over seeds.
- **Figure** ``<file_stem>.png``: one column per env, one row per metric; each series' means with their 95 %
  intervals at its levels, the reference arm's mean as a line with its interval as a band.
"""

from __future__ import annotations

import math
from pathlib import Path

from prism.experiments.grid import ENV_FILES, LEARNED_REWARD_METHODS, Preset, Sweep, SweepSeries
from prism.experiments.ratios import PRIMARY_METRIC, RatioRow
from prism.experiments.stats import mean_se
from prism.experiments.tables import Table, arm_label, fmt

INSIDE, OUTSIDE, OVERLAPS = "inside", "outside", "overlaps"
"""Where a comparison's Welch–Fieller interval lies against its series' band."""


def mean_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the mean with its two-sided t interval over ``values`` (NaN ends below 2 values)."""
    from scipy import stats

    mean, se = mean_se(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, len(values) - 1)) * se
    return mean, mean - half, mean + half


def band_position(low: float, high: float, band: tuple[float, float] | None) -> str:
    """Where the interval [low, high] lies against ``band``: inside it, outside it (disjoint), or overlapping
    it; "—" with no band or no interval."""
    if band is None or math.isnan(low) or math.isnan(high):
        return "—"
    if band[0] <= low and high <= band[1]:
        return INSIDE
    if high < band[0] or low > band[1]:
        return OUTSIDE
    return OVERLAPS


def _levels(sweep: Sweep) -> list[float]:
    """Every level of the sweep, in the order its series first name them (the x axis)."""
    return list(dict.fromkeys(level for series in sweep.series for level, _ in series.arms))


def _points(preset: Preset, table: Table, sweep: Sweep, env: str, series: SweepSeries):
    """(level, arm, final values per metric) of the series' arms that ``env`` runs and that have runs."""
    arms = preset.methods_for(env)
    for level, arm in series.arms:
        if arm in arms and (env, arm) in table:
            yield level, arm, {m: table[(env, arm)][f"final_{m}"] for m in sweep.metrics}


def _ci(low: float, high: float, digits: str = ".3g") -> str:
    return "—" if math.isnan(low) else f"[{low:{digits}}, {high:{digits}}]"


def _value(values: list[float]) -> str:
    """``mean [low, high]`` with two decimals, a common power of ten for large values (as the arm table's)."""
    mean, low, high = mean_interval(values)
    if math.isnan(mean):
        return "—"
    exponent = int(math.floor(math.log10(abs(mean)))) if abs(mean) >= 1e4 else 0
    scale = 10.0**exponent
    text = f"{mean / scale:.2f} {_ci(low / scale, high / scale, '.2f')}"
    return f"{text} e{exponent}" if exponent else text


def level_rows(preset: Preset, table: Table, sweep: Sweep) -> tuple[list[str], list[dict]]:
    """The level table: each series' arm per level, and the reference arm, per env (markdown, CSV rows)."""
    metrics = sweep.metrics
    lines = [
        "| env | series | "
        + sweep.key
        + " | arm | n | "
        + " | ".join(f"{m.upper()} mean [95% CI]" for m in metrics)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(metrics),
    ]
    rows = []
    for env in preset.envs:
        entries = [
            (series.label, f"{level:g}", arm, finals)
            for series in sweep.series
            for level, arm, finals in _points(preset, table, sweep, env, series)
        ]
        reference = sweep.reference
        if reference and reference in preset.methods_for(env) and (env, reference) in table:
            finals = {m: table[(env, reference)][f"final_{m}"] for m in metrics}
            entries.append(("reference", "—", reference, finals))
        for label, level, arm, finals in entries:
            n = len(finals[metrics[0]])
            cells = " | ".join(_value(finals[m]) for m in metrics)
            lines.append(
                f"| {ENV_FILES[env]} | {label} | {level} | {arm_label(preset, env, arm)} | {n} | {cells} |"
            )
            for metric in metrics:
                mean, low, high = mean_interval(finals[metric])
                rows.append(
                    {
                        "statistic": "mean",
                        "env": ENV_FILES[env],
                        "series": label,
                        "level": level,
                        "arm": arm,
                        "metric": metric,
                        "n": n,
                        "value": mean,
                        "ci_low": low,
                        "ci_high": high,
                    }
                )
    return lines, rows


def comparison_rows(preset: Preset, sweep: Sweep, ratios: list[RatioRow]) -> tuple[list[str], list[dict]]:
    """The comparison table: each level's HV ratio row over the series' ``versus`` arm, from the study's ratio
    table (markdown, CSV rows)."""
    by_key = {
        (row.env, row.ratio.numerator, row.ratio.denominator): row
        for row in ratios
        if row.metric == PRIMARY_METRIC
    }
    margin = f"±{preset.equivalence_margin:.0%}"
    lines = [
        f"| env | series | {sweep.key} | A / B | ratio | 95% CI (Welch–Fieller) | 1 − ratio [95% CI] "
        f"| family | TOST p ({margin}) | verdict | band | against the band |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = []
    for env in preset.envs:
        env_id = ENV_FILES[env]
        for series in sweep.series:
            if not series.versus:
                continue
            for level, arm in series.arms:
                row = by_key.get((env_id, arm, series.versus))
                if row is None:
                    continue  # the comparison arm's own level (no ratio of it to itself), or an arm not run here
                ratio = row.boot["ratio"]
                low, high = row.interval
                band = series.band
                position = band_position(low, high, band)
                band_text = f"[{band[0]:g}, {band[1]:g}]" if band else "—"
                drop = "—" if math.isnan(ratio) else f"{1 - ratio:.2f} {_ci(1 - high, 1 - low, '.2f')}"
                family = "primary" if row.primary else "exploratory"
                p_tost = "—" if math.isnan(row.p_tost) else f"{row.p_tost:.3f}"
                ratio_text = "—" if math.isnan(ratio) else f"{ratio:.2f}"
                lines.append(
                    f"| {env_id} | {series.label} | {level:g} | {arm} / {series.versus} | {ratio_text} "
                    f"| {_ci(low, high, '.2f')} | {drop} | {family} | {p_tost} | {row.verdict} | {band_text} "
                    f"| {position} |"
                )
                rows.append(
                    {
                        "statistic": "ratio",
                        "env": env_id,
                        "series": series.label,
                        "level": f"{level:g}",
                        "arm": arm,
                        "versus": series.versus,
                        "metric": PRIMARY_METRIC,
                        "value": ratio,
                        "ci_low": low,
                        "ci_high": high,
                        "family": family,
                        "p_tost": row.p_tost,
                        "verdict": row.verdict,
                        "band_low": band[0] if band else "",
                        "band_high": band[1] if band else "",
                        "band_position": position,
                    }
                )
    return lines, rows


def _store_values(records: list[dict]) -> tuple[list[float], list[float]]:
    """(segments per episode, validation per-step Pearson) of one cycle's fit records, where recorded."""
    per_episode, pearson = [], []
    for record in records:
        store = record.get("store") or {}
        if store.get("episodes"):
            per_episode.append(store["segments"] / store["episodes"])
        value = (record.get("validation") or {}).get("pearson")
        if value is not None and not math.isnan(value):
            pearson.append(float(value))
    return per_episode, pearson


def store_rows(preset: Preset, table: Table, sweep: Sweep) -> tuple[list[str], list[dict]]:
    """The segment-store table: per env, series, level and refinement cycle of the arms that fit a reward
    model (markdown, CSV rows; empty when no series has such an arm with runs)."""
    lines = [
        f"| env | series | {sweep.key} | arm | cycle | n | segments per episode | val per-step Pearson |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = []
    for env in preset.envs:
        for series in sweep.series:
            for level, arm, _ in _points(preset, table, sweep, env, series):
                if preset.arm(arm).method not in LEARNED_REWARD_METHODS:
                    continue
                per_seed = [fits for fits in table[(env, arm)]["fits"] if fits]
                label = arm_label(preset, env, arm)
                if not per_seed:  # runs written before the fit records
                    lines.append(
                        f"| {ENV_FILES[env]} | {series.label} | {level:g} | {label} | — | 0 | — | — |"
                    )
                    continue
                for cycle in range(max(len(fits) for fits in per_seed)):
                    records = [fits[cycle] for fits in per_seed if len(fits) > cycle]
                    per_episode, pearson = _store_values(records)
                    lines.append(
                        f"| {ENV_FILES[env]} | {series.label} | {level:g} | {label} | {cycle + 1} "
                        f"| {len(records)} | {fmt(*mean_se(per_episode))} | {fmt(*mean_se(pearson))} |"
                    )
                    for statistic, values in (
                        ("segments_per_episode", per_episode),
                        ("val_pearson", pearson),
                    ):
                        mean, se = mean_se(values)
                        rows.append(
                            {
                                "statistic": statistic,
                                "env": ENV_FILES[env],
                                "series": series.label,
                                "level": f"{level:g}",
                                "arm": arm,
                                "cycle": cycle + 1,
                                "n": len(values),
                                "value": mean,
                                "se": se,
                            }
                        )
    return (lines if len(lines) > 2 else []), rows


def sweep_section(
    preset: Preset, table: Table, sweep: Sweep, ratios: list[RatioRow]
) -> tuple[list[str], list[dict]]:
    """One sweep's markdown section and its CSV rows (``<file_stem>.csv``)."""
    level_lines, level_csv = level_rows(preset, table, sweep)
    comparison_lines, comparison_csv = comparison_rows(preset, sweep, ratios)
    store_lines, store_csv = store_rows(preset, table, sweep)
    reference = f", beside {sweep.reference} (the reference line)" if sweep.reference else ""
    lines = [
        f"### {', '.join(s.label for s in sweep.series)} against {sweep.key}",
        "",
        f"Figure: `{sweep.file_stem}.png` (one panel per env and metric: each series' mean final value at each "
        f"level of {sweep.key} with its 95% t interval over seeds{reference}).",
        "",
        "Mean final value per level, with its 95% t interval over seeds (mean ± t · SE):",
        "",
        *level_lines,
        "",
    ]
    if comparison_csv:
        lines += [
            "Each level's HV against the series' comparison arm: the HV row of the ratio table below (the "
            "Welch–Fieller interval, the TOST p at the study's margin and the verdict are that row's); "
            '1 − ratio is the drop, its interval the ratio\'s mirrored; "against the band": the interval lies '
            "inside the range a claim gives, outside it, or overlaps it:",
            "",
            *comparison_lines,
            "",
        ]
    if store_lines:
        lines += [
            "The segment store of each level's fits (each run's `summary.json` `reward_fits`): segments per "
            "episode (1 when nothing is released inside an episode) and the fit's per-step Pearson with the "
            "hidden channel on the held-out segments, mean ± SE over seeds:",
            "",
            *store_lines,
            "",
        ]
    return lines, level_csv + comparison_csv + store_csv


def plot_sweep(preset: Preset, table: Table, sweep: Sweep, path: Path) -> None:
    """The sweep's figure: one column per env with runs, one row per metric (:mod:`prism.experiments.sweeps`)."""
    from prism.experiments.plots import _pyplot

    plt = _pyplot()
    levels = _levels(sweep)
    x_of = {level: i for i, level in enumerate(levels)}
    envs = [e for e in preset.envs if any((e, arm) in table for arm in sweep.arms())]
    if not envs:
        return
    fig, axes = plt.subplots(
        len(sweep.metrics), len(envs), figsize=(4.2 * len(envs), 3.2 * len(sweep.metrics)), squeeze=False
    )
    for col, env in enumerate(envs):
        for row, metric in enumerate(sweep.metrics):
            ax = axes[row][col]
            for k, series in enumerate(sweep.series):
                points = [
                    (x_of[level], *mean_interval(finals[metric]))
                    for level, _, finals in _points(preset, table, sweep, env, series)
                ]
                if not points:
                    continue
                xs, means, lows, highs = (list(v) for v in zip(*points))
                errors = [
                    [0.0 if math.isnan(lo) else m - lo for m, lo in zip(means, lows)],
                    [0.0 if math.isnan(hi) else hi - m for m, hi in zip(means, highs)],
                ]
                ax.errorbar(xs, means, yerr=errors, marker="o", capsize=3, label=series.label, color=f"C{k}")
            reference = sweep.reference
            if reference and reference in preset.methods_for(env) and (env, reference) in table:
                mean, low, high = mean_interval(table[(env, reference)][f"final_{metric}"])
                ax.axhline(mean, color="tab:green", linestyle="--", label=reference)
                if not math.isnan(low):
                    ax.axhspan(low, high, color="tab:green", alpha=0.15)
            ax.set_xticks(range(len(levels)), [f"{level:g}" for level in levels])
            ax.set_xlabel(sweep.key)
            ax.set_ylabel(f"final {metric.upper()}")
            if row == 0:
                ax.set_title(ENV_FILES[env])
            if row == 0 and col == 0:
                ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

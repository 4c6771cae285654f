"""The report's reward-fit diagnostics: per env, arm and refinement cycle, what each run's ``summary.json``
``reward_fits`` records (fields in :mod:`prism.loop.fit_phase` and
:class:`prism.reward.quality.RewardQuality`), over the seeds.

Runs written before ``reward_fits`` existed have none: their arm gets one row of "—". Only arms whose method
fits ReSymNet (:data:`~prism.experiments.grid.LEARNED_REWARD_METHODS`) are listed.
"""

from __future__ import annotations

import math
import statistics

from prism.experiments.grid import ENV_FILES, LEARNED_REWARD_METHODS, Preset
from prism.experiments.stats import mean_se
from prism.experiments.tables import Table, arm_label, fmt

QUALITY_COLUMNS = (
    ("validation", "segment_sum_mse", "val episode-sum MSE"),
    ("validation", "pearson", "val Pearson"),
    ("validation", "pearson_non_final", "val Pearson, non-final steps"),
    ("validation", "mean_predicted_terminal", "val terminal step: predicted"),
    ("validation", "mean_true_terminal", "val terminal step: true"),
    ("validation", "mean_predicted_other", "val other steps: predicted"),
    ("validation", "mean_true_other", "val other steps: true"),
    # The held-out episodes a trained policy collected: how well the model prices the policies it shapes.
    ("validation_expert", "pearson", "val expert episodes: Pearson"),
    ("new_episodes", "pearson", "new episodes, previous model: Pearson"),
    ("new_episodes", "segment_sum_mse", "new episodes, previous model: episode-sum MSE"),
)
"""(record key, RewardQuality field, column header): mean ± SE over the seeds that have the value."""
UNIFORM_COLUMNS = (
    # Uniform R/T scored on the same held-out and new episodes (runs since the records have them): the per-step
    # baseline beside the model's Pearson. Shown only when some run of the grid records it, so that reports of
    # older runs recompute unchanged.
    ("validation_uniform", "pearson", "val uniform R/T: Pearson"),
    ("new_episodes_uniform", "pearson", "new episodes, uniform R/T: Pearson"),
)
FIT_COLUMNS = (
    "env",
    "arm",
    "n",
    "cycle",
    "store episodes (train / val)",
    "epochs run (median)",
    "best epoch (median)",
    "fit wall s",
    *(header for _, _, header in QUALITY_COLUMNS),
)
"""The columns of the diagnostics table (and of ``fits.csv``)."""


def _values(records: list[dict], key: str, field: str) -> list[float]:
    out = []
    for record in records:
        value = (record.get(key) or {}).get(field)
        if value is not None and not math.isnan(value):
            out.append(float(value))
    return out


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):g}" if values else "—"


def _learned_arms(preset: Preset, table: Table) -> list[tuple[str, str]]:
    return [
        (env, arm)
        for env in preset.envs
        for arm in preset.methods_for(env)
        if preset.arm(arm).method in LEARNED_REWARD_METHODS and (env, arm) in table
    ]


def fit_rows(preset: Preset, table: Table) -> list[dict[str, str]]:
    """One row per (env, arm with a learned reward, cycle): store size, epochs, fit time and fit quality (and
    uniform R/T's per-step Pearson on the same episodes, when some run records it)."""
    arms = _learned_arms(preset, table)
    records_of = {key: [fits for fits in table[key]["fits"] if fits] for key in arms}  # seeds with records
    with_uniform = any(
        record.get("validation_uniform") is not None
        for per_seed in records_of.values()
        for fits in per_seed
        for record in fits
    )
    quality_columns = (*QUALITY_COLUMNS, *(UNIFORM_COLUMNS if with_uniform else ()))
    columns = (*FIT_COLUMNS, *(header for _, _, header in quality_columns[len(QUALITY_COLUMNS) :]))
    rows = []
    for env, arm in arms:
        per_seed = records_of[(env, arm)]
        base = {"env": ENV_FILES[env], "arm": arm_label(preset, env, arm)}
        if not per_seed:
            rows.append({**base, **dict.fromkeys(columns[2:], "—")})
            continue
        for cycle in range(max(len(fits) for fits in per_seed)):
            records = [fits[cycle] for fits in per_seed if len(fits) > cycle]
            stores = [r.get("store") or {} for r in records]
            train = [(s.get("train") or {}).get("episodes") for s in stores]
            val = [(s.get("validation") or {}).get("episodes") for s in stores]
            epochs = [e for r in records for e in r.get("epochs_run") or ()]
            best = [e for r in records for e in r.get("best_epoch") or ()]
            row = {
                **base,
                "n": str(len(records)),
                # Counted from 1 as everywhere else; from the record's position, which is the cycle in old
                # summary.json files (0-based cycle keys) and new ones (1-based) alike.
                "cycle": str(cycle + 1),
                "store episodes (train / val)": (
                    f"{_median([t for t in train if t is not None])} / "
                    f"{_median([v for v in val if v is not None])}"
                ),
                "epochs run (median)": _median(epochs),
                "best epoch (median)": _median(best),
                "fit wall s": fmt(*mean_se([r["wall_time_s"] for r in records if r.get("wall_time_s")])),
            }
            for key, field, header in quality_columns:
                row[header] = fmt(*mean_se(_values(records, key, field)))
            rows.append(row)
    return rows


def fit_table(preset: Preset, table: Table) -> list[str]:
    """:func:`fit_rows` as markdown ("—" where a run has no such record)."""
    rows = fit_rows(preset, table)
    if not rows:
        return ["(no arm of this grid fits a reward model)"]
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row[h] for h in columns) + " |" for row in rows]
    return lines

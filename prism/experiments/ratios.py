"""The report's ratio table: per env, each of the preset's ratios A / B of final means with the tests its words
rest on (:mod:`prism.experiments.inference`): the Welch–Fieller 95 % interval (the one that decides), the
percentile bootstrap CI beside it for reference, Welch's p (uncorrected), the Holm-adjusted p of the preset's
primary family, the TOST p at the preset's equivalence margin, and the one verdict the row allows.

The primary family is every HV row of a :attr:`~prism.experiments.grid.Ratio.primary` ratio (in the preset's
``primary_envs``, if it names any) whose arms both have ≥ 2 finished seeds; EUM and VO rows, and the rows of
non-primary ratios, are exploratory."""

from __future__ import annotations

import math
from dataclasses import dataclass

from prism.experiments import inference
from prism.experiments.grid import ENV_FILES, METHODS, METRICS, Preset, Ratio
from prism.experiments.stats import compare
from prism.experiments.tables import PaperValues, Table

PRIMARY_METRIC = "hv"
"""The metric of the primary family (the paper's headline metric); other metrics' rows are exploratory."""
NAN_STATS = {"ratio": math.nan, "p_welch": math.nan, "ci_low": math.nan, "ci_high": math.nan}


@dataclass(frozen=True)
class RatioRow:
    """One (env, metric, ratio) of the table with its statistics."""

    env: str
    """The env id (``mo-walker2d-v5``)."""
    metric: str
    ratio: Ratio
    protocols: str
    boot: dict[str, float]
    """:func:`prism.experiments.stats.compare`: ratio of means, Welch p, percentile bootstrap CI."""
    interval: tuple[float, float]
    """The Welch–Fieller 95 % interval."""
    p_tost: float
    primary: bool
    p_holm: float
    """NaN for an exploratory row (and for a primary one without 2 seeds a side)."""
    paper: str
    ahead: bool
    """A's mean final value is above B's."""
    paper_ratio: float = math.nan
    """The paper's own ratio of means (``paper`` prints it to 2 decimals); NaN where it has none."""

    @property
    def verdict(self) -> str:
        if math.isnan(self.boot["ratio"]):
            return inference.NOT_MEASURED  # fewer than 2 seeds a side: no test ran, so no word is earned
        return inference.verdict(
            self.ahead, self.boot["p_welch"], self.p_holm if self.primary else None, self.p_tost
        )


def is_ratio_of_sizes(x: list[float], y: list[float]) -> bool:
    """Whether A / B of these final values is a ratio of means at all: B's mean above 0 and A's not below 0
    (EUM and VO can be negative; a ratio of such means is undefined or of the wrong sign). Rows where it is
    not show no ratio, interval, TOST p or verdict, only the Welch p of the difference."""
    return bool(x and y) and sum(y) / len(y) > 0 and sum(x) / len(x) >= 0


def undefined_note(rows: list[RatioRow]) -> list[str]:
    """The line under the ratio table naming how many rows have no ratio of means ([] when none)."""
    undefined = [r for r in rows if math.isnan(r.boot["ratio"]) and not math.isnan(r.boot["p_welch"])]
    if not undefined:
        return []
    return [
        "",
        f"{len(undefined)} row{'s' if len(undefined) > 1 else ''} above compare{'' if len(undefined) > 1 else 's'} "
        "a negative mean (B's not above 0, or A's below 0): a ratio of such means is not defined, so "
        'the row shows no ratio, interval, TOST p or verdict ("—"), only the Welch p of the difference.',
    ]


def _paper_ratio(
    preset: Preset, paper: PaperValues, env: str, env_id: str, a: str, b: str, metric: str
) -> float:
    """The paper's ratio of A's mean over B's (NaN: no counterpart in the paper's tables)."""
    if preset.arm(a).method == preset.arm(b).method:
        return math.nan  # the same method of the paper under two protocols or agents: no paper counterpart
    if not (preset.paper_counterpart(env, a) and preset.paper_counterpart(env, b)):
        return math.nan  # an arm on another task (another channel sparse, or released along the episode)

    def theirs(arm: str) -> float:
        return paper.get((env_id, METHODS[preset.arm(arm).method][1], metric), (math.nan, math.nan))[0]

    x, y = theirs(a), theirs(b)
    return math.nan if math.isnan(x) or math.isnan(y) or y == 0 else x / y


def ratio_rows(preset: Preset, table: Table, paper: PaperValues) -> list[RatioRow]:
    """Every ratio row of the report, the primary family Holm-adjusted together; a ratio whose arms the env
    does not both run is left out."""
    pending = []
    for env in preset.envs:
        env_id = ENV_FILES[env]
        arms = preset.methods_for(env)
        for ratio in preset.ratio_rows():
            a, b = ratio.numerator, ratio.denominator
            if a not in arms or b not in arms:
                continue
            a_entry, b_entry = table.get((env, a)), table.get((env, b))
            for metric in METRICS:
                x = a_entry[f"final_{metric}"] if a_entry else []
                y = b_entry[f"final_{metric}"] if b_entry else []
                boot = compare(x, y) if a_entry and b_entry else dict(NAN_STATS)
                sized = is_ratio_of_sizes(x, y)
                theirs = _paper_ratio(preset, paper, env, env_id, a, b, metric)
                if not sized:  # keep the difference's Welch p; drop everything that reads a ratio
                    boot = {**boot, "ratio": math.nan, "ci_low": math.nan, "ci_high": math.nan}
                pending.append(
                    dict(
                        env=env_id,
                        metric=metric,
                        ratio=ratio,
                        protocols=f"{preset.protocol_of(a)} / {preset.protocol_of(b)}",
                        boot=boot,
                        interval=inference.ratio_interval(x, y) if sized else (math.nan, math.nan),
                        p_tost=inference.tost_ratio(x, y, preset.equivalence_margin) if sized else math.nan,
                        primary=ratio.primary
                        and metric == PRIMARY_METRIC
                        and (not preset.primary_envs or env in preset.primary_envs),
                        paper="—" if math.isnan(theirs) else f"{theirs:.2f}",
                        paper_ratio=theirs,
                        ahead=bool(x and y and sum(x) / len(x) > sum(y) / len(y)),
                    )
                )
    family = [i for i, row in enumerate(pending) if row["primary"] and not math.isnan(row["boot"]["ratio"])]
    adjusted = dict(zip(family, inference.holm([pending[i]["boot"]["p_welch"] for i in family])))
    return [RatioRow(**row, p_holm=adjusted.get(i, math.nan)) for i, row in enumerate(pending)]


def _p(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.3f}"


def _ratio(row: RatioRow) -> str:
    return "—" if math.isnan(row.boot["ratio"]) else f"{row.boot['ratio']:.2f}"


def _interval(low: float, high: float) -> str:
    if math.isnan(low):
        return "—"
    return f"[{low:.2f}, {high:.2f}]" if math.isfinite(high) else f"[{low:.2f}, ∞)"


def ratio_table(preset: Preset, rows: list[RatioRow]) -> tuple[list[str], list[dict]]:
    """The ratio table's markdown lines and CSV rows."""
    margin = f"±{preset.equivalence_margin:.0%}"
    lines = [
        "| env | metric | A / B | protocols | what it measures | ours (final means) | 95% CI (Welch–Fieller) "
        f"| bootstrap 95% CI | Welch p (uncorrected) | family | Holm p | TOST p ({margin}) | verdict | paper |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    csv_rows = []
    for row in rows:
        a, b = row.ratio.numerator, row.ratio.denominator
        ours = _ratio(row)
        family = "primary" if row.primary else "exploratory"
        holm = _p(row.p_holm) if row.primary else "—"
        lines.append(
            f"| {row.env} | {row.metric.upper()} | {a} / {b} | {row.protocols} | {row.ratio.label or '—'} "
            f"| {ours} | {_interval(*row.interval)} | {_interval(row.boot['ci_low'], row.boot['ci_high'])} "
            f"| {_p(row.boot['p_welch'])} | {family} | {holm} | {_p(row.p_tost)} | {row.verdict} | {row.paper} |"
        )
        csv_rows.append(
            {
                "env": row.env,
                "metric": row.metric,
                "numerator": a,
                "denominator": b,
                "protocols": row.protocols,
                "label": row.ratio.label,
                **row.boot,
                "ci_fieller_low": row.interval[0],
                "ci_fieller_high": row.interval[1],
                "family": family,
                "p_holm": row.p_holm,
                "margin": preset.equivalence_margin,
                "p_tost": row.p_tost,
                "verdict": row.verdict,
                "paper": row.paper,
            }
        )
    return lines, csv_rows


def family_lines(preset: Preset, rows: list[RatioRow]) -> list[str]:
    """The report's statement of its primary family and what each of its rows may be called."""
    primary = [row for row in rows if row.primary]
    if not primary:
        return [
            "This preset declares no primary comparison: every ratio row is exploratory, its Welch p "
            'uncorrected, and no row may say "beats".'
        ]
    lines = [
        f"Primary comparisons ({len(primary)} HV row{'s' if len(primary) > 1 else ''}, Holm-adjusted together; "
        "every other row is exploratory "
        'and its Welch p uncorrected). A row says "beats" only here at Holm p < 0.05:',
        "",
        "| env | A / B | ratio | 95% CI (Welch–Fieller) | Welch p | Holm p | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in primary:
        lines.append(
            f"| {row.env} | {row.ratio.numerator} / {row.ratio.denominator} | {_ratio(row)} "
            f"| {_interval(*row.interval)} | {_p(row.boot['p_welch'])} | {_p(row.p_holm)} | {row.verdict} |"
        )
    return lines

"""The report's judgement of the paper's sentences (a preset's :attr:`~prism.experiments.grid.Preset.paper_claims`)
from its own ratio rows (:mod:`prism.experiments.ratios`).

Each row that carries a claim (one per env that runs both arms, and metric) has the verdict the ratio table
prints (:func:`prism.experiments.inference.verdict`: a primary HV row is significant only at Holm p < 0.05, an
exploratory row at uncorrected Welch p < 0.05, a tie only at TOST p < 0.05 within the preset's margin). A row
**supports** the claim when that verdict is a significant difference in the claimed direction (for an
``equal`` claim: a tie), **opposes** it when it is a significant difference the other way (for an ``equal``
claim: any significant difference), and is otherwise open. The claim then:

- **holds** where every row supports it;
- is **contradicted** where any row opposes it;
- is **in the claimed direction, not significant** where every mean points the claimed way (for ``equal``: no
  row is significant, but not every row is shown equivalent, "not shown");
- is **not shown** otherwise (the means point both ways, nothing significant);
- is **not run yet** while a row lacks 2 seeds on either side.
"""

from __future__ import annotations

import math

from prism.experiments import inference
from prism.experiments.grid import ENV_FILES, METRICS, PaperClaim, Preset
from prism.experiments.ratios import RatioRow

HOLDS = "holds"
CONTRADICTED = "contradicted"
SAME_DIRECTION = "in the claimed direction, not significant"
NOT_SHOWN = "not shown"
NOT_RUN = "not run yet"
CLAIM_VERDICTS = (HOLDS, CONTRADICTED, SAME_DIRECTION, NOT_SHOWN, NOT_RUN)

SUPPORTS, OPPOSES, OPEN = "supports", "opposes", "open"
_SIGNIFICANT = {
    "lower": ({inference.LOSES, inference.BEHIND}, {inference.BEATS, inference.AHEAD}),
    "higher": ({inference.BEATS, inference.AHEAD}, {inference.LOSES, inference.BEHIND}),
}


def claim_rows(claim: PaperClaim, rows: list[RatioRow]) -> list[RatioRow]:
    """The ratio rows that carry ``claim``, in the ratio table's order."""
    pairs = set(claim.ratios)
    envs = {ENV_FILES[env] for env in claim.envs}
    return [
        r
        for r in rows
        if (r.ratio.numerator, r.ratio.denominator) in pairs
        and r.metric in claim.metrics
        and (not envs or r.env in envs)
    ]


def paper_ratio_in_interval(row: RatioRow) -> str:
    """Whether the paper's own ratio lies inside the row's Welch–Fieller 95 % interval: ``yes``, ``no``, or
    ``—`` where either is missing. A ratio outside it is one the runs here make unlikely at that level."""
    low, high = row.interval
    if math.isnan(row.paper_ratio) or math.isnan(low):
        return "—"
    return "yes" if low <= row.paper_ratio <= high else "no"


def row_status(row: RatioRow, expect: str) -> str:
    """Whether one ratio row supports, opposes or leaves open a claim that the numerator is ``expect``
    (``lower``/``higher``/``equal``) against the denominator."""
    verdict = row.verdict
    if expect == "equal":
        if verdict == inference.TIES:
            return SUPPORTS
        return OPPOSES if verdict in _SIGNIFICANT["lower"][0] | _SIGNIFICANT["higher"][0] else OPEN
    supporting, opposing = _SIGNIFICANT[expect]
    if verdict in supporting:
        return SUPPORTS
    return OPPOSES if verdict in opposing else OPEN


def _measured(row: RatioRow) -> bool:
    return not math.isnan(row.boot["p_welch"])


def claim_verdict(claim: PaperClaim, rows: list[RatioRow]) -> str:
    """The claim's verdict from the rows that carry it (:func:`claim_rows`); see the module's docstring."""
    if not rows or not all(_measured(r) for r in rows):
        return NOT_RUN
    status = [row_status(r, claim.expect) for r in rows]
    if OPPOSES in status:
        return CONTRADICTED
    if all(s == SUPPORTS for s in status):
        return HOLDS
    if claim.expect == "equal":
        return NOT_SHOWN
    claimed_way = (lambda r: r.ahead) if claim.expect == "higher" else (lambda r: not r.ahead)
    return SAME_DIRECTION if all(claimed_way(r) for r in rows) else NOT_SHOWN


def _p(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.3f}"


def _interval(low: float, high: float) -> str:
    if math.isnan(low):
        return "—"
    return f"[{low:.2f}, {high:.2f}]" if math.isfinite(high) else f"[{low:.2f}, ∞)"


def paper_claims_section(preset: Preset, rows: list[RatioRow]) -> tuple[list[str], list[dict]]:
    """The report's section of the paper's sentences, each quoted with its verdict and the rows it rests on,
    and the CSV rows (one per claim and ratio row); empty for a preset without claims."""
    if not preset.paper_claims:
        return [], []
    margin = preset.equivalence_margin
    lines = [
        "The paper's sentences, each judged from the ratio rows above that carry it (A / B per env and metric; "
        '"holds" only where every row is significant in the claimed direction — a primary HV row at Holm '
        "p < 0.05, an exploratory row at uncorrected Welch p < 0.05, marked so — or, for a claim of no "
        f'difference, a tie at TOST p < 0.05 within ±{margin:.0%}; "contradicted" where any row is '
        'significant the other way; otherwise "in the claimed direction, not significant" or "not shown"; '
        "`prism/experiments/paper_claims.py` has the rules). The last columns give the paper's own ratio of "
        "means and whether the row's 95% CI holds it:",
        "",
    ]
    csv_rows: list[dict] = []
    for number, claim in enumerate(preset.paper_claims, start=1):
        carried = claim_rows(claim, rows)
        verdict = claim_verdict(claim, carried)
        expect = {"lower": "A below B", "higher": "A above B", "equal": f"A within ±{margin:.0%} of B"}
        lines += [
            f"{number}. > {claim.quote}",
            "",
            f"   Claimed: {expect[claim.expect]}. **Verdict: {verdict}.**"
            + (f" {claim.note}" if claim.note else ""),
            "",
            "   | env | metric | A / B | ratio | 95% CI (Welch–Fieller) | Welch p | Holm p | TOST p | row "
            "| paper's ratio | in the CI |",
            "   |---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in carried:
            ratio = "—" if math.isnan(row.boot["ratio"]) else f"{row.boot['ratio']:.2f}"
            family = "" if row.primary else " (exploratory)"
            measured = _measured(row)
            status = row_status(row, claim.expect) if measured else "—"
            shown = f"{row.verdict}: {status}" if measured else "—"
            lines.append(
                f"   | {row.env} | {row.metric.upper()}{family} | {row.ratio.numerator} / "
                f"{row.ratio.denominator} | {ratio} | {_interval(*row.interval)} | {_p(row.boot['p_welch'])} "
                f"| {_p(row.p_holm)} | {_p(row.p_tost)} | {shown} | {row.paper} | {paper_ratio_in_interval(row)} |"
            )
            csv_rows.append(
                {
                    "claim": number,
                    "quote": claim.quote,
                    "expect": claim.expect,
                    "claim_verdict": verdict,
                    "env": row.env,
                    "metric": row.metric,
                    "numerator": row.ratio.numerator,
                    "denominator": row.ratio.denominator,
                    "family": "primary" if row.primary else "exploratory",
                    "ratio": row.boot["ratio"],
                    "ci_fieller_low": row.interval[0],
                    "ci_fieller_high": row.interval[1],
                    "p_welch": row.boot["p_welch"],
                    "p_holm": row.p_holm,
                    "p_tost": row.p_tost,
                    "row_verdict": row.verdict,
                    "row_status": status,
                    "paper_ratio": row.paper_ratio,
                    "paper_ratio_in_ci": paper_ratio_in_interval(row),
                }
            )
        lines.append("")
    return lines, csv_rows


def check_claims(preset: Preset) -> None:
    """Every claim's ratios must be rows of the preset, its ``expect`` and metrics known: a typo would leave
    a claim judged on nothing."""
    known = {(r.numerator, r.denominator) for r in preset.ratio_rows()}
    for claim in preset.paper_claims:
        if claim.expect not in ("lower", "higher", "equal"):
            raise ValueError(f"paper claim {claim.quote!r}: expect={claim.expect!r} (lower, higher or equal)")
        for pair in claim.ratios:
            if pair not in known:
                raise ValueError(
                    f"paper claim {claim.quote!r}: {pair[0]} / {pair[1]} is not a ratio of the preset"
                )
        for env in claim.envs:
            if env not in preset.envs:
                raise ValueError(f"paper claim {claim.quote!r}: env {env!r} is not one of the study's")
        for metric in claim.metrics:
            if metric not in METRICS:
                raise ValueError(
                    f"paper claim {claim.quote!r}: metric {metric!r} (one of {', '.join(METRICS)})"
                )


__all__ = [
    "CLAIM_VERDICTS",
    "check_claims",
    "claim_rows",
    "claim_verdict",
    "paper_claims_section",
    "paper_ratio_in_interval",
    "row_status",
]

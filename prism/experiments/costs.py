"""What each arm's seeds cost, for a report: CPU minutes per phase (``summary.json``'s
``phase_times`` and its fits' training/validation split, :mod:`prism.core.phase_clock`) as medians over seeds, each
arm's median total over a reference arm's (the oracle), and a preset's cost gates (:class:`CostGate`).

Medians, not means: one seed that shared its core, or resumed and redid a phase, should not move an arm's
cost. A run from before phase times reports only its total; its phase cells are "—".
"""

from __future__ import annotations

import statistics

from prism.core.phase_clock import REMAINDER, fit_split
from prism.experiments.grid import ENV_FILES, CostGate, Preset

Table = dict[tuple[str, str], dict[str, list]]

COST_COLUMNS = (
    ("collect", "collections"),
    ("fit_train", "fits: training"),
    ("fit_validation", "fits: validation"),
    ("fit_rest", "fits: rest"),
    ("eval", "evaluations"),
    ("rl", "RL and other"),
)
"""(key, header) of the per-phase columns, in CPU minutes."""


def run_cost(summary: dict) -> dict[str, float | None]:
    """One run's CPU seconds: ``total`` and each :data:`COST_COLUMNS` key (None where the run does not say).
    ``fit_rest`` is the fit phases' time outside their training epochs and validation passes (set-up, the
    final scoring, the shaped-vs-true figure)."""
    out: dict[str, float | None] = {key: None for key, _ in COST_COLUMNS}
    out["total"] = summary.get("cpu_time_s")
    phases = summary.get("phase_times")
    if phases is None:
        return out
    cpu = {name: value["cpu_s"] for name, value in phases.items()}
    out["collect"] = cpu["collect_random"] + cpu["collect_expert"]
    splits = [fit_split(record) for record in summary.get("reward_fits") or []]
    if all(split is not None for split in splits):
        out["fit_train"] = sum(s[0] for s in splits if s is not None)
        out["fit_validation"] = sum(s[1] for s in splits if s is not None)
        out["fit_rest"] = cpu["fit"] - out["fit_train"] - out["fit_validation"]
    out["eval"] = cpu["eval_periodic"] + cpu["eval_final"]
    out["rl"] = cpu[REMAINDER]
    return out


def median_cost(costs: list[dict[str, float | None]], key: str) -> float | None:
    """The median over seeds of ``key`` (None when a seed lacks it)."""
    values = [c[key] for c in costs]
    if not values or any(v is None for v in values):
        return None
    return float(statistics.median(v for v in values if v is not None))


def _minutes(value: float | None) -> str:
    return "—" if value is None else f"{value / 60:.1f}"


def _references(preset: Preset, env: str) -> list[str]:
    """The arms the env's costs are divided by: its gates' references, in order (default ``e-oracle``)."""
    refs = [g.reference for g in preset.cost_gates if g.env == env]
    return list(dict.fromkeys(refs)) or ["e-oracle"]


def cost_section(preset: Preset, table: Table) -> tuple[list[str], list[dict[str, str]]]:
    """The report's cost table (markdown lines, CSV rows) and its gates; empty where no run has a CPU time.
    Each arm's median total is divided by each reference's (one ``× <reference>`` column per reference: CPU
    seconds compare only between runs of one machine, so a preset may name a reference run on each)."""
    rows = []
    references = list(dict.fromkeys(r for env in preset.envs for r in _references(preset, env)))
    for env in preset.envs:
        ref_totals = {
            ref: median_cost(table.get((env, ref), {}).get("costs") or [], "total") for ref in references
        }
        for arm in preset.methods_for(env):
            costs = table.get((env, arm), {}).get("costs") or []
            total = median_cost(costs, "total")
            if total is None:
                continue
            row = {"env": ENV_FILES[env], "arm": arm, "n": str(len(costs)), "total_min": _minutes(total)}
            row.update({f"{key}_min": _minutes(median_cost(costs, key)) for key, _ in COST_COLUMNS})
            for ref, ref_total in ref_totals.items():
                row[f"over_{ref}"] = "—" if not ref_total else f"{total / ref_total:.2f}"
            rows.append(row)
    if not rows:
        return [], []
    header = (
        "| env | arm | n | CPU min (median) | "
        + " | ".join(h for _, h in COST_COLUMNS)
        + "".join(f" | × {ref}" for ref in references)
        + " |"
    )
    lines = [
        "CPU time per seed (`summary.json` `cpu_time_s` and `phase_times`; medians over seeds, minutes; the "
        "fits' columns add up every fit of the run; a run from before phase times shows only its total; "
        "× an arm: the median total over that arm's median total in the same env):",
        "",
        header,
        "|" + "---|" * (4 + len(COST_COLUMNS) + len(references)),
    ]
    for row in rows:
        cells = [
            row["env"],
            row["arm"],
            row["n"],
            row["total_min"],
            *(row[f"{k}_min"] for k, _ in COST_COLUMNS),
        ]
        cells += [row[f"over_{ref}"] for ref in references]
        lines.append("| " + " | ".join(cells) + " |")
    for gate in preset.cost_gates:
        lines += ["", gate_line(gate, table)]
    return lines, rows


def gate_line(gate: CostGate, table: Table) -> str:
    """One cost gate's verdict: the arm's median CPU total over the reference's, against the bound."""
    arm = median_cost(table.get((gate.env, gate.arm), {}).get("costs") or [], "total")
    ref = median_cost(table.get((gate.env, gate.reference), {}).get("costs") or [], "total")
    if arm is None or not ref:
        return f"Cost gate ({ENV_FILES[gate.env]}): {gate.arm} / {gate.reference} not measurable yet."
    ratio = arm / ref
    verdict = "holds" if ratio <= gate.max_ratio else "fails"
    return (
        f"Cost gate ({ENV_FILES[gate.env]}): median CPU time of {gate.arm} {arm / 60:.1f} min / {gate.reference} "
        f"{ref / 60:.1f} min = **{ratio:.2f}** (bound ≤ {gate.max_ratio:g}): {verdict}."
    )


__all__ = ["COST_COLUMNS", "cost_section", "gate_line", "median_cost", "run_cost"]

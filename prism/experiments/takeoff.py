"""The report's take-off count (:class:`~prism.experiments.grid.TakeOff`): on an env where most runs stall
(halfcheetah at small budgets), how many seeds per arm moved at all, here and at another study's budget."""

from __future__ import annotations

from pathlib import Path

from prism.experiments.collect import read_eval, split_rows
from prism.experiments.grid import ENV_FILES, Preset, TakeOff
from prism.experiments.tables import Table


def final_returns(runs: Path, env: str, arm: str, objective: str) -> list[tuple[int, float]]:
    """(seed, the final evaluation's mean undiscounted ``objective`` return) of every finished run under
    ``runs/<env>/<arm>/seed<k>``, by seed."""
    out = []
    for summary in sorted((runs / env / arm).glob("seed*/summary.json")):
        seed = int(summary.parent.name.removeprefix("seed"))
        _, final = split_rows(read_eval(summary.parent))
        out.append((seed, final[f"undiscounted_return_{objective}"]))
    return sorted(out)


def _count(values: list[float], threshold: float) -> str:
    if not values:
        return "—"
    return f"{sum(v > threshold for v in values)} of {len(values)}"


def _listing(values: list[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in sorted(values, reverse=True)) if values else "—"


def take_off_section(preset: Preset, table: Table) -> tuple[list[str], list[dict]]:
    """The take-off table (markdown lines) and its CSV rows (one per arm and study)."""
    spec: TakeOff | None = preset.take_off
    if spec is None:
        return [], []
    key = f"final_undiscounted_return_{spec.objective}"
    reference = spec.reference_folder()
    label = spec.reference_label or (str(spec.reference_runs) if reference else "")
    lines = [
        f"Take-off on {ENV_FILES[spec.env]}: seeds whose final evaluation's mean undiscounted "
        f"`{spec.objective}` return (over its policies) exceeds {spec.threshold:g}, with every seed's value "
        "(largest first)" + (f", beside the same arms at {label}:" if reference else ":"),
        "",
        "| arm | took off | final undiscounted "
        + spec.objective
        + " return per seed |"
        + (f" took off ({label}) | per seed ({label}) |" if reference else ""),
        "|---|---|---|" + ("---|---|" if reference else ""),
    ]
    rows = []
    for arm in preset.methods_for(spec.env):
        entry = table.get((spec.env, arm))
        values = list(entry[key]) if entry and key in entry else []
        line = f"| {arm} | {_count(values, spec.threshold)} | {_listing(values)} |"
        rows.append(
            {
                "arm": arm,
                "study": "this",
                "took_off": sum(v > spec.threshold for v in values),
                "runs": len(values),
            }
        )
        if reference is not None:
            ref = [v for _, v in final_returns(reference, spec.env, arm, spec.objective)]
            line += f" {_count(ref, spec.threshold)} | {_listing(ref)} |"
            rows.append(
                {
                    "arm": arm,
                    "study": label,
                    "took_off": sum(v > spec.threshold for v in ref),
                    "runs": len(ref),
                }
            )
        lines.append(line)
    return lines, rows


__all__ = ["final_returns", "take_off_section"]

"""The report's count of diverged critics: per env and arm, the finished runs whose ``summary.json`` records a
``critic_divergence_step`` (:mod:`prism.agents.divergence`: the critic loss past 100× its running median), so a
stabiliser's effect reads as a count beside its HV."""

from __future__ import annotations

import json
from pathlib import Path

from prism.experiments.grid import ENV_FILES, Cell, Preset

DIVERGENCE_KEY = "critic_divergence_step"


def run_divergence(run_dir: Path) -> tuple[bool, int | None]:
    """(whether the run's summary.json records the watch at all, the env step of the divergence or None)."""
    summary = json.loads((run_dir / "summary.json").read_text() or "{}")
    if DIVERGENCE_KEY not in summary:  # a run from before the watch
        return False, None
    step = summary[DIVERGENCE_KEY]
    return True, None if step is None else int(step)


def divergence_section(preset: Preset, cells: list[Cell], out: Path) -> tuple[list[str], list[dict]]:
    """Markdown lines and CSV rows (one per finished run that records the watch) of the diverged-critic count;
    empty when no finished run records it."""
    rows = []
    unrecorded: dict[tuple[str, str], int] = {}
    for cell in cells:
        run_dir = cell.run_dir(out)
        if not (run_dir / "summary.json").is_file():
            continue
        recorded, step = run_divergence(run_dir)
        if not recorded:
            unrecorded[(cell.env, cell.method)] = unrecorded.get((cell.env, cell.method), 0) + 1
            continue
        rows.append({"env": cell.env, "arm": cell.method, "seed": cell.seed, DIVERGENCE_KEY: step})
    if not rows:
        return [], []
    lines = [
        "Diverged critics: finished runs whose critic loss passed 100× its running median "
        f"(`{DIVERGENCE_KEY}` in summary.json, docs/method.md §6), among the runs that record the watch "
        "(runs from before it do not):",
        "",
        "| env | arm | recorded | diverged | seed: step | not recorded |",
        "|---|---|---|---|---|---|",
    ]
    for env in preset.envs:
        for arm in preset.methods_for(env):
            mine = [r for r in rows if r["env"] == env and r["arm"] == arm]
            if not mine:
                continue
            hit = [r for r in mine if r[DIVERGENCE_KEY] is not None]
            steps = ", ".join(
                f"{r['seed']}: {r[DIVERGENCE_KEY]}" for r in sorted(hit, key=lambda r: r["seed"])
            )
            lines.append(
                f"| {ENV_FILES[env]} | {arm} | {len(mine)} | {len(hit)} | {steps or '—'} | "
                f"{unrecorded.get((env, arm), 0)} |"
            )
    return lines, rows


__all__ = ["DIVERGENCE_KEY", "divergence_section", "run_divergence"]

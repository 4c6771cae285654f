"""The report's take-off count (:class:`~prism.experiments.grid.TakeOff`): on an env where most runs stall
(halfcheetah at small budgets), how many seeds per arm moved at all, here and at another study's budget."""

from __future__ import annotations

from pathlib import Path

from prism.experiments.collect import read_eval, split_rows
from prism.experiments.grid import ENV_FILES, Preset, TakeOff
from prism.experiments.stats import fisher_exact_p, rate_interval
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


def _final_values(table: Table, spec: TakeOff, arm: str) -> list[float]:
    """Every finished seed's final mean undiscounted ``spec.objective`` return of ``arm`` on the take-off env."""
    entry = table.get((spec.env, arm))
    key = f"final_undiscounted_return_{spec.objective}"
    return list(entry[key]) if entry and key in entry else []


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
        values = _final_values(table, spec, arm)
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


def _counts(table: Table, spec: TakeOff, arm: str) -> tuple[int, int]:
    """(seeds that took off, finished seeds) of ``arm`` on the take-off env."""
    values = _final_values(table, spec, arm)
    return sum(v > spec.threshold for v in values), len(values)


def _rate(took_off: int, runs: int, interval: tuple[float, float]) -> str:
    return "—" if runs == 0 else f"{took_off} of {runs} [{interval[0]:.2f}, {interval[1]:.2f}]"


def take_off_tests(preset: Preset, table: Table) -> tuple[list[str], list[dict]]:
    """Whether one arm takes off more often than another: for each of the preset's ratio pairs on the take-off
    env, both counts with their exact (Clopper–Pearson) 95 % CIs and the two-sided p of Fisher's exact test
    that the two arms share one take-off rate. Markdown lines and CSV rows (one per pair)."""
    spec: TakeOff | None = preset.take_off
    if spec is None:
        return [], []
    arms = set(preset.methods_for(spec.env))
    pairs = [
        (r.numerator, r.denominator) for r in preset.ratio_rows() if {r.numerator, r.denominator} <= arms
    ]
    lines = [
        "Take-off rates compared, for each ratio pair: each arm's count with its exact (Clopper–Pearson) 95% CI "
        "of the rate, and the two-sided p of Fisher's exact test that both arms share one rate:",
        "",
        "| X vs Y | X took off | Y took off | Fisher p |",
        "|---|---|---|---|",
    ]
    rows = []
    for x, y in dict.fromkeys(pairs):  # a pair named twice is tested once
        (kx, nx), (ky, ny) = _counts(table, spec, x), _counts(table, spec, y)
        p = fisher_exact_p(kx, nx, ky, ny)
        (lx, hx), (ly, hy) = rate_interval(kx, nx), rate_interval(ky, ny)
        shown_p = "—" if nx == 0 or ny == 0 else f"{p:.3f}"
        lines.append(f"| {x} vs {y} | {_rate(kx, nx, (lx, hx))} | {_rate(ky, ny, (ly, hy))} | {shown_p} |")
        rows.append(
            {
                "x": x,
                "y": y,
                "took_off_x": kx,
                "runs_x": nx,
                "ci_low_x": lx,
                "ci_high_x": hx,
                "took_off_y": ky,
                "runs_y": ny,
                "ci_low_y": ly,
                "ci_high_y": hy,
                "p_fisher": p,
            }
        )
    return lines, rows


__all__ = ["final_returns", "take_off_section", "take_off_tests"]

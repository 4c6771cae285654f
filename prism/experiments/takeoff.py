"""The report's take-off count (:class:`~prism.experiments.grid.TakeOff`): on an env where most runs stall
(halfcheetah at small budgets), how many seeds per arm moved at all, here and at another study's budget."""

from __future__ import annotations

import csv
from pathlib import Path

from prism.experiments.collect import read_eval, split_rows
from prism.experiments.grid import ENV_FILES, Cell, Preset, TakeOff
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


ON_ITS_BACK = 0.5
"""A seed counts as on its back when at least this fraction of its evaluation episodes were spent mostly on the
back (``flipped_fraction``, :attr:`prism.evaluation.result.EvalResult.flipped_fraction`)."""

REEVALUATION_FILE = "evaluate.csv"
"""``prism evaluate RUN`` 's output in a run folder: a re-evaluation of the run's last checkpoint, read for the
flip count when the run's own final evaluation predates ``flipped_fraction``."""


def seed_flip(run_dir: Path, objective: str) -> tuple[float, float | None, str]:
    """(the final evaluation's mean undiscounted ``objective`` return, its ``flipped_fraction`` or None, where
    that fraction comes from: ``final``, ``re-evaluation`` (``evaluate.csv``'s last row) or ``—``)."""
    _, final = split_rows(read_eval(run_dir))
    forward = final[f"undiscounted_return_{objective}"]
    if "flipped_fraction" in final:
        return forward, final["flipped_fraction"], "final"
    again = run_dir / REEVALUATION_FILE
    if again.is_file():
        with again.open(newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("flipped_fraction") not in ("", None)]
        if rows:
            return forward, float(rows[-1]["flipped_fraction"]), "re-evaluation"
    return forward, None, "—"


def flip_section(preset: Preset, cells: list[Cell], out: Path) -> tuple[list[str], list[dict]]:
    """Why a stalled seed stalls: for each arm of the take-off env, its finished seeds split by take-off and by
    whether the cheetah spent most evaluation episodes on its back. Markdown lines and CSV rows (one per seed).
    Empty where the take-off env records no ``flipped_fraction`` at all."""
    spec: TakeOff | None = preset.take_off
    if spec is None:
        return [], []
    rows = []
    for cell in cells:
        run_dir = cell.run_dir(out)
        if cell.env != spec.env or not (run_dir / "summary.json").is_file():
            continue
        forward, flipped, source = seed_flip(run_dir, spec.objective)
        rows.append(
            {
                "arm": cell.method,
                "seed": cell.seed,
                f"final_undiscounted_return_{spec.objective}": forward,
                "took_off": int(forward > spec.threshold),
                "flipped_fraction": "" if flipped is None else flipped,
                "on_its_back": "" if flipped is None else int(flipped >= ON_ITS_BACK),
                "source": source,
            }
        )
    if not any(r["source"] != "—" for r in rows):
        return [], []
    lines = [
        f"On its back or upright: each seed's `flipped_fraction` (the share of its evaluation episodes spent mostly "
        f"on the back, mean cos(torso angle) < 0); a seed counts as on its back at ≥ {ON_ITS_BACK:g}. It comes from "
        "the final evaluation where the run recorded it, else from `evaluate.csv` (`prism evaluate` of the run's "
        "last checkpoint); runs older than the measure that kept no checkpoint are not recorded:",
        "",
        "| arm | recorded | stalled, on its back | stalled, upright | took off, on its back | took off, upright "
        "| not recorded | per seed: flipped fraction (source) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm in preset.methods_for(spec.env):
        mine = sorted((r for r in rows if r["arm"] == arm), key=lambda r: r["seed"])
        if not mine:
            continue
        seen = [r for r in mine if r["source"] != "—"]

        def count(took_off: int, back: int, seen: list[dict] = seen) -> int:
            return sum(r["took_off"] == took_off and r["on_its_back"] == back for r in seen)

        listing = ", ".join(
            f"{r['seed']}: {r['flipped_fraction']:.2f} ({'final' if r['source'] == 'final' else 're-eval.'})"
            for r in seen
        )
        lines.append(
            f"| {arm} | {len(seen)} of {len(mine)} | {count(0, 1)} | {count(0, 0)} | {count(1, 1)} | "
            f"{count(1, 0)} | {len(mine) - len(seen)} | {listing or '—'} |"
        )
    return lines, rows


__all__ = ["final_returns", "flip_section", "seed_flip", "take_off_section", "take_off_tests"]

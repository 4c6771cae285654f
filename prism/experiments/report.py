"""A grid's report: ``table.csv``, ``ratios.csv``, ``table.md`` (arm table beside the paper's numbers, ratios,
per-objective returns, reward-fit diagnostics, the rliable aggregate where the preset asks for one) and the
figures, from the finished runs of a grid's cells; each own run's small files are copied to ``runs/`` beside
them so the report recomputes from the repository."""

from __future__ import annotations

import csv
from pathlib import Path

from prism.experiments import stats
from prism.experiments.collect import collect, copy_run_files, paper_values
from prism.experiments.costs import cost_section
from prism.experiments.divergence import divergence_section
from prism.experiments.fits import fit_rows, fit_table
from prism.experiments.grid import ENV_FILES, HEALTHY_BONUS_ENVS, Aggregate, Cell, Preset
from prism.experiments.paper_claims import paper_claims_section
from prism.experiments.plots import plot, plot_aggregate, plot_objective_curves
from prism.experiments.ratios import family_lines, ratio_rows, ratio_table, undefined_note
from prism.experiments.stats import AggregateResult
from prism.experiments.sweeps import plot_sweep, sweep_section
from prism.experiments.tables import Table, arm_table, objective_table, thin_ratio_note
from prism.experiments.takeoff import flip_section, take_off_section, take_off_tests
from prism.experiments.what_ran import what_ran_lines

SECTION_FILES = (
    "ratios.csv",
    "paper_claims.csv",
    "fits.csv",
    "costs.csv",
    "takeoff.csv",
    "takeoff_tests.csv",
    "flips.csv",
    "divergence.csv",
)
"""The CSVs of the report's optional sections: each written only when its section has rows."""


def _clear_sections(preset: Preset, results: Path) -> None:
    """Remove the optional sections' CSVs (and the aggregates' files) a previous report left: a section that
    has no rows now must not leave its old numbers beside the new report. Nothing else in the folder is
    touched."""
    names = [
        *SECTION_FILES,
        *(f"{spec.file_stem}{ext}" for spec in preset.aggregates() for ext in (".csv", ".png")),
        *(f"{sweep.file_stem}{ext}" for sweep in preset.sweeps for ext in (".csv", ".png")),
    ]
    for name in names:
        (results / name).unlink(missing_ok=True)


def _write_csv(path: Path, rows: list[dict]) -> None:
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, lineterminator="\n", restval="")
        writer.writeheader()
        writer.writerows(rows)


def _aggregate(preset: Preset, spec: Aggregate, table: Table) -> AggregateResult | None:
    envs = spec.envs or preset.envs
    arms = (*spec.arms, spec.normaliser)
    finals = {
        (env, arm): table[(env, arm)]["final_hv"] for env in envs for arm in arms if (env, arm) in table
    }
    return stats.aggregate(finals, envs, spec, resamples=stats.AGGREGATE_RESAMPLES)


def aggregate_lines(spec: Aggregate, result: AggregateResult | None) -> tuple[list[str], list[dict]]:
    """The aggregate's markdown section and its CSV rows."""
    # A named aggregate (over the envs some arm ran in) says which arms it holds; the main one holds the grid's.
    of_arms = f" of {', '.join(spec.arms)}" if spec.name else ""
    if result is None:
        return [
            f"(no env has at least 2 finished runs of every aggregated arm yet: no aggregate{of_arms})"
        ], []
    envs = ", ".join(ENV_FILES.get(e, e) for e in result.envs)
    lines = [
        f"Aggregate{of_arms} over {envs}, computed with rliable (Agarwal et al. 2021): each run's final HV divided by the "
        f"mean final HV of {spec.normaliser} in its env; the interquartile mean (IQM) over runs × envs, and the "
        "probability of improvement P(X > Y) (per env the fraction of run pairs with X > Y, ties ½, averaged "
        f"over envs), each with a stratified bootstrap 95% CI ({stats.AGGREGATE_RESAMPLES} resamples of the runs "
        f"within each env). Figure: `{spec.file_stem}.png`.",
        "",
        "| arm | runs per env | IQM of normalised final HV | 95% CI |",
        "|---|---|---|---|",
    ]
    rows = []
    for arm, interval in result.iqm.items():
        lines.append(
            f"| {arm} | {result.runs[arm]} | {interval.value:.3f} | [{interval.low:.3f}, {interval.high:.3f}] |"
        )
        rows.append(
            {
                "statistic": "iqm",
                "x": arm,
                "y": "",
                "value": interval.value,
                "ci_low": interval.low,
                "ci_high": interval.high,
            }
        )
    lines += ["", "| X > Y | P(X > Y) | 95% CI |", "|---|---|---|"]
    for (x, y), interval in result.improvement.items():
        lines.append(f"| {x} > {y} | {interval.value:.3f} | [{interval.low:.3f}, {interval.high:.3f}] |")
        rows.append(
            {
                "statistic": "probability_of_improvement",
                "x": x,
                "y": y,
                "value": interval.value,
                "ci_low": interval.low,
                "ci_high": interval.high,
            }
        )
    return lines, rows


def _no_bonus_clause(preset: Preset) -> str:
    """The objective table's caveat for the preset's envs without a healthy bonus ("" when it has none)."""
    others = [ENV_FILES[env] for env in preset.envs if env not in HEALTHY_BONUS_ENVS]
    if not others:
        return ""
    verb = "has" if len(others) == 1 else "have"
    return f"; {' and '.join(others)} {verb} no such bonus, and no such column"


def write_report(
    preset_name: str,
    preset: Preset,
    cells: list[Cell],
    out: Path,
    results: Path,
    recompute: str = "",
    study_seeds: tuple[int, ...] | None = None,
) -> str:
    """Write the report of ``preset``'s finished ``cells`` (run folders under ``out``, joined arms' under
    their own) into ``results``; returns its markdown. ``recompute`` is the command that rebuilds it;
    ``study_seeds`` are the seeds the study declares where ``preset`` was narrowed to fewer (the header's
    "what ran" lines set the seeds found beside them).

    The aggregate is computed first: a missing optional dependency stops the report before anything is
    written."""
    table = collect(cells, out)
    aggregates = [(spec, _aggregate(preset, spec, table)) for spec in preset.aggregates()]
    paper = paper_values(preset.backbone, preset.paper_tables)
    results.mkdir(parents=True, exist_ok=True)
    _clear_sections(preset, results)
    lines, csv_rows = arm_table(preset, table, paper)
    ratios = ratio_rows(preset, table, paper)
    ratio_lines, ratio_csv = ratio_table(preset, ratios)
    _write_csv(results / "table.csv", csv_rows)
    if ratio_csv:
        _write_csv(results / "ratios.csv", ratio_csv)
    copy_run_files(cells, out, results)
    what_ran = what_ran_lines(preset, cells, out, study_seeds)
    sections = [f"## {preset_name}: {preset.description}", "", *((*what_ran, "") if what_ran else ())]
    # A sweep is what its study is for: its figure and verdicts come first.
    for sweep in preset.sweeps:
        sweep_lines, sweep_csv = sweep_section(preset, table, sweep, ratios)
        if sweep_csv:
            _write_csv(results / f"{sweep.file_stem}.csv", sweep_csv)
        sections += sweep_lines
    sections += [
        "Final = the evaluation at the end of each run (row flagged `final` in eval.csv); best periodic = "
        "the best of the periodic evaluations along the run. Mean ± standard error over seeds.",
        "",
        *lines,
        "",
        "Ratios of final means over seeds (a ratio of negative or near-zero values is not meaningful). The "
        "95% CI that decides is the Welch–Fieller interval: the ratios r that Welch's t-test of A against r·B "
        "does not reject at 5%, so it excludes 1 exactly when Welch's p < 0.05. The percentile bootstrap CI "
        "(10 000 resamples of the seeds within each method) is shown for reference only: with 5 seeds per arm "
        "it is too narrow (at n ≤ 5 it excluded 1 where Welch's p was 0.06–0.11). Welch p is two-sided and uncorrected; Holm p is adjusted across the preset's "
        f"primary family. TOST p tests that the ratio lies within [{1 - preset.equivalence_margin:.2f}, "
        f"{1 + preset.equivalence_margin:.2f}] (the preset's equivalence margin ±{preset.equivalence_margin:.0%}, "
        'two one-sided Welch-type tests). The verdict: "beats"/"loses to" only for a primary row at '
        'Holm p < 0.05; "ties" only where TOST p < 0.05; "ahead"/"behind (exploratory)" for any '
        'other row at uncorrected p < 0.05; otherwise "not distinguishable" '
        "(`prism/experiments/inference.py` has the maths).",
        "",
        *family_lines(preset, ratios),
        "",
        "All ratios:",
        "",
        *ratio_lines,
        *undefined_note(ratios),
        *thin_ratio_note(preset, table),
        "",
        "Per-objective mean returns of the final evaluation (mean over its policies, then mean ± SE over "
        "seeds): discounted (γ = 0.99, what HV/EUM/VO are computed from) and undiscounted, and the mean "
        "episode length (on mo-hopper-v5 and mo-walker2d-v5 every objective includes a healthy bonus of 1 "
        "per step alive, so an undiscounted return minus the episode length is the objective net of "
        f"survival{_no_bonus_clause(preset)}):",
        "",
        *objective_table(preset, table),
        "",
    ]
    claim_lines, claim_rows_csv = paper_claims_section(preset, ratios)
    if claim_rows_csv:
        _write_csv(results / "paper_claims.csv", claim_rows_csv)
        sections += claim_lines
    fits = fit_rows(preset, table)
    # Runs older than the records show "—"; a table of nothing else says nothing, so it is left out.
    if any(row["n"] != "—" for row in fits):
        _write_csv(results / "fits.csv", fits)
        sections += [
            "Reward-fit diagnostics per arm and refinement cycle (each run's `summary.json` `reward_fits`; mean "
            "± SE over the seeds that recorded them, epochs as medians over seeds × ensemble members; "
            '"new episodes" are those an expert collection brought in, scored by the model that shaped the RL '
            "phase before them; runs older than these records show —):",
            "",
            *fit_table(preset, table),
            "",
        ]
    if preset.cost_table:
        cost_lines, cost_rows = cost_section(preset, table)
        if cost_rows:
            _write_csv(results / "costs.csv", cost_rows)
            sections += [*cost_lines, ""]
    take_off_lines, take_off_rows = take_off_section(preset, table)
    if take_off_rows:
        _write_csv(results / "takeoff.csv", take_off_rows)
        test_lines, test_rows = take_off_tests(preset, table)
        if test_rows:
            _write_csv(results / "takeoff_tests.csv", test_rows)
        sections += [
            *take_off_lines,
            "",
            *((*test_lines, "") if test_rows else ()),
            f"Learning curves of that return: `{preset.take_off.objective}_curves.png`.",
            "",
        ]
        flip_lines, flip_rows = flip_section(preset, cells, out)
        if flip_rows:
            _write_csv(results / "flips.csv", flip_rows)
            sections += [*flip_lines, ""]
    divergence_lines, divergence_rows = divergence_section(preset, cells, out)
    if divergence_rows:
        _write_csv(results / "divergence.csv", divergence_rows)
        sections += [*divergence_lines, ""]
    for spec, result in aggregates:
        agg_lines, agg_rows = aggregate_lines(spec, result)
        if agg_rows:
            _write_csv(results / f"{spec.file_stem}.csv", agg_rows)
            plot_aggregate(result, spec.normaliser, results / f"{spec.file_stem}.png")
        sections += [*agg_lines, ""]
    joined = sorted({(j.label, j.runs) for j in preset.joined})
    if joined:
        sections += [
            "Arms marked `← <study>` are read from another study's committed runs, not run here: "
            + "; ".join(f"{label}: `{runs}`" for label, runs in joined)
            + ".",
            "",
        ]
    if recompute:
        sections += [f"Recompute every number above from the run files: `{recompute}`", ""]
    markdown = "\n".join(sections)
    (results / "table.md").write_text(markdown)
    plot(preset, table, out, cells, results)
    for sweep in preset.sweeps:
        plot_sweep(preset, table, sweep, results / f"{sweep.file_stem}.png")
    if preset.take_off is not None:
        plot_objective_curves(preset, table, results)
    return markdown

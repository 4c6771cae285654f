"""Reading a grid's finished runs: eval.csv's final and periodic rows, summary.json's reward-fit records, the
paper's numbers, and copying each run's small files into the report folder."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

from prism.experiments.costs import run_cost
from prism.experiments.grid import METRICS, Cell

PAPER = Path(__file__).resolve().parent / "paper_results.csv"
"""Every number of the paper's tables, as printed (raw value = mean × scale)."""
PAPER_TABLES = {"capql": ("main", "ablation", "ablation2"), "gpi_pd": ("gpi_pd",)}
"""The paper's tables of each backbone (``table`` column of :data:`PAPER`)."""


def read_eval(run_dir: Path) -> list[dict[str, float]]:
    with (run_dir / "eval.csv").open(newline="") as fh:
        return [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(fh)]


def read_fit_records(run_dir: Path) -> list[dict] | None:
    """A run's ``summary.json`` ``reward_fits`` (one record per fit), or None for a run written before that
    key existed."""
    records = json.loads((run_dir / "summary.json").read_text() or "{}").get("reward_fits")
    return records if isinstance(records, list) else None


def paper_values(
    backbone: str = "capql", tables: tuple[str, ...] = ()
) -> dict[tuple[str, str, str], tuple[float, float]]:
    """(env id, paper method header, metric) -> (raw mean, raw err) from the paper's tables of ``backbone``, or
    from ``tables`` when given (e.g. ``("control_cost",)``: the appendix table where the control cost is the
    sparse channel)."""
    tables = tables or PAPER_TABLES[backbone]
    out: dict[tuple[str, str, str], tuple[float, float]] = {}
    with PAPER.open() as fh:
        rows = csv.DictReader(line for line in fh if not line.startswith("#"))
        for row in rows:
            if row["table"] not in tables:
                continue
            scale = float(row["scale"])
            out.setdefault(
                (row["env"], row["method"], row["metric"].lower()),
                (float(row["mean"]) * scale, float(row["err"]) * scale),
            )
    return out


def split_rows(rows: list[dict[str, float]]) -> tuple[list[dict[str, float]], dict[str, float]]:
    """(periodic rows, the final-evaluation row) of one eval.csv.

    The final row is the one flagged ``final = 1`` (the paper's protocol, written once at the end of a run);
    eval.csv files from before that rule have no flag, and then the last row stands for it. Rows flagged
    ``cycle_end`` (``eval.final.each_cycle``: the final protocol at an earlier cycle's end) are neither: see
    :func:`cycle_end_rows`."""
    rows = [r for r in rows if not r.get("cycle_end")]
    if rows and "final" in rows[0]:
        periodic = [r for r in rows if not r.get("final")]
        finals = [r for r in rows if r.get("final")]
        if finals:
            return periodic or finals, finals[-1]
    return rows, rows[-1]


def cycle_end_rows(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    """The rows of one eval.csv flagged ``cycle_end = 1``, in env-step order: the final protocol at the end of
    cycle 1, 2, … but the last (a run with ``eval.final.each_cycle``; empty for any other run)."""
    return sorted((r for r in rows if r.get("cycle_end")), key=lambda r: r["env_steps"])


def collect(cells: list[Cell], out: Path) -> dict[tuple[str, str], dict[str, list]]:
    """Per (env, arm): the final evaluation and the best periodic one per metric (one value per finished
    seed), the env steps of the final evaluation, the HV curves of the periodic evaluations, and each seed's
    reward-fit records (``fits``: None for a run without them)."""
    table: dict[tuple[str, str], dict[str, list]] = {}
    for cell in cells:
        run_dir = cell.run_dir(out)
        if not (run_dir / "summary.json").is_file():
            continue
        rows = read_eval(run_dir)
        if cell.cycle_end:
            ends = cycle_end_rows(rows)
            if len(ends) < cell.cycle_end:
                raise ValueError(
                    f"{run_dir}/eval.csv: no cycle_end row for cycle {cell.cycle_end} (was it run with "
                    "eval.final.each_cycle=true?)"
                )
            final = ends[cell.cycle_end - 1]
            periodic, _ = split_rows([r for r in rows if r["env_steps"] <= final["env_steps"]])
        else:
            periodic, final = split_rows(rows)
        entry = table.setdefault(
            (cell.env, cell.method), {"seeds": [], "curves": [], "env_steps": [], "fits": []}
        )
        entry["seeds"].append(cell.seed)
        entry["env_steps"].append(final["env_steps"])
        for metric in METRICS:
            entry.setdefault(f"final_{metric}", []).append(final[metric])
            entry.setdefault(f"best_{metric}", []).append(max(r[metric] for r in periodic))
        # Per-objective mean returns of the final evaluation (over its policies) and its mean episode length.
        for key, value in final.items():
            if key.startswith(("return_", "undiscounted_return_")) or key == "mean_episode_length":
                entry.setdefault(f"final_{key}", []).append(value)
        entry["curves"].append([(r["env_steps"], r["hv"]) for r in periodic])
        # Each periodic evaluation's per-objective undiscounted returns (the take-off curves).
        entry.setdefault("periodic_returns", []).append(
            [
                {k: v for k, v in r.items() if k.startswith("undiscounted_return_") or k == "env_steps"}
                for r in periodic
            ]
        )
        entry["fits"].append(read_fit_records(run_dir))
        entry.setdefault("costs", []).append(
            run_cost(json.loads((run_dir / "summary.json").read_text() or "{}"))
        )
    return table


RUN_FILES = ("config.yaml", "eval.csv", "front.csv", "summary.json", "evaluate.csv")
"""What a run's numbers are recomputed from (no checkpoints, no TensorBoard events); ``evaluate.csv`` (a
re-evaluation of the last checkpoint by ``prism evaluate``) only where one was made and committed."""
POPULATION_FILES = ("config.yaml", "summary.csv")


def copy_run_files(cells: list[Cell], out: Path, results: Path) -> None:
    """Copy each finished run's small files (:data:`RUN_FILES`, and a population's own config and summary) to
    ``results/runs/<env>/<method>/[seed<k>/]``, so every reported number can be recomputed from the repository
    (``--report-only --out <results>/runs`` rebuilds the tables from them). Joined arms' runs stay where they
    are: their own report keeps them."""
    for cell in cells:
        run_dir = cell.run_dir(out)
        if cell.source is not None or not (run_dir / "summary.json").is_file():
            continue
        target = results / "runs" / cell.env / cell.method / f"seed{cell.seed}"
        if target.resolve() == run_dir.resolve():  # reporting from the copies themselves
            continue
        target.mkdir(parents=True, exist_ok=True)
        for name in RUN_FILES:
            if (run_dir / name).is_file():
                _copy(run_dir / name, target / name, results)
        for name in POPULATION_FILES:
            if (run_dir.parent / name).is_file():
                _copy(run_dir.parent / name, target.parent / name, results)


def _copy(source: Path, target: Path, results: Path) -> None:
    """Copy one run file; a config.yaml's ``run_dir`` becomes its copy's folder relative to ``results``
    (``runs/<env>/<arm>/seed<k>``), so the committed copy names no machine's absolute path (prism reads the
    folder it is given, not this key)."""
    if source.name != "config.yaml":
        shutil.copyfile(source, target)
        return
    relative = target.parent.relative_to(results).as_posix()
    text = re.sub(r"^run_dir: .*$", f"run_dir: {relative}", source.read_text(), count=1, flags=re.M)
    target.write_text(text)

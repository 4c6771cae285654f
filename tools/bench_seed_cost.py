"""Where a PRISM seed's time goes, beside an oracle seed's (issue 61): CPU minutes per phase, side by side.

Runs, one after the other in this process's core(s), an oracle seed and a PRISM seed of the same env and budget
(table1-study's: 2 × 25 000 RL steps, N = 1000 random and E = 50 expert episodes, ≤ 100 fit epochs, the
randomized loss: its ``e-oracle`` and ``e-prism-fast`` arms), plus one PRISM seed per ``--variant`` (the same
with more overrides, e.g. a cheaper fit), then prints each run's CPU time per phase (``summary.json``'s
``phase_times`` and each fit's ``reward_fits`` split; prism.core.phase_clock) and its total over the oracle's:

    taskset -c 1 python tools/bench_seed_cost.py --env swimmer --out /tmp/seed-cost \\
        --variant fast=conf/fit/fast.yaml [--steps-per-cycle 5000]
    python tools/bench_seed_cost.py --env swimmer --out /tmp/seed-cost --report-only   # the table again
    python tools/bench_seed_cost.py --env swimmer --out /tmp/seed-cost --report-only \
        --column fast-fit=docs/results/fit-cost/runs/swimmer/e-prism-fastfit/seed0       # and another run

A run already finished in ``--out`` is read, not run again (a stopped one is resumed), so an interrupted
benchmark goes on where it stopped. ``--steps-per-cycle`` shrinks the RL budget (and so RL, evaluation and the
expert policy's quality) but not the fits, which dominate a PRISM seed. CPU time is the process's (threads
included), which a shared core does not inflate; pin the benchmark with ``taskset``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # (run from a checkout: prism itself, for the study's commands)

from prism.core.phase_clock import REMAINDER, fit_split  # noqa: E402

PHASE_LABELS = (
    ("collect_random", "random collection"),
    ("collect_expert", "expert collection"),
)
EVAL_LABELS = (("eval_periodic", "periodic evaluation"), ("eval_final", "final evaluation"))


@dataclass(frozen=True)
class Column:
    """One run of the table: its name and its ``summary.json``."""

    name: str
    summary: dict


def cost_rows(summary: dict) -> list[tuple[str, float | None]]:
    """A run's CPU seconds per row of the table, in order: the collections, each fit's training epochs,
    validation passes and rest, the fit phase's own rest (what the phase spent outside the fits: the
    shaped-vs-true figure), the evaluations, RL and everything else, then the total (``cpu_time_s``). The rows
    above the total add up to it; None where the run does not say (a run from before phase times)."""
    phases = summary.get("phase_times")
    if phases is None:
        return [("total", summary.get("cpu_time_s"))]
    rows: list[tuple[str, float | None]] = [(label, phases[key]["cpu_s"]) for key, label in PHASE_LABELS]
    fits_cpu = 0.0
    for record in summary.get("reward_fits", []):
        split = fit_split(record)
        cycle = record["cycle"]
        if split is None:
            rows.append((f"fit {cycle}", record.get("cpu_time_s")))
            fits_cpu += record.get("cpu_time_s") or 0.0
            continue
        train, validation, rest = split
        rows += [
            (f"fit {cycle}: training epochs", train),
            (f"fit {cycle}: validation passes", validation),
            (f"fit {cycle}: set-up and scoring", rest),
        ]
        fits_cpu += train + validation + rest
    if summary.get("reward_fits"):
        rows.append(("fit phase: figures, memory", phases["fit"]["cpu_s"] - fits_cpu))
    rows += [(label, phases[key]["cpu_s"]) for key, label in EVAL_LABELS]
    rows.append(("RL and other", phases[REMAINDER]["cpu_s"]))
    rows.append(("total", summary.get("cpu_time_s")))
    return rows


def fit_share(summary: dict) -> float | None:
    """The fraction of the run's CPU time spent in its fit phases (None where unknown)."""
    phases, total = summary.get("phase_times"), summary.get("cpu_time_s")
    if phases is None or not total:
        return None
    return phases["fit"]["cpu_s"] / total


def format_table(columns: list[Column], reference: str = "e-oracle") -> str:
    """The runs' :func:`cost_rows` side by side in CPU minutes (a row missing from a run: blank), then each
    total over the ``reference`` run's."""
    per_run = [dict(cost_rows(c.summary)) for c in columns]
    labels: list[str] = []
    for c in columns:
        labels += [label for label, _ in cost_rows(c.summary) if label not in labels]
    labels.remove("total")
    labels.append("total")
    width = max(len(label) for label in labels) + 2
    head = "CPU minutes".ljust(width) + "".join(f"{c.name:>16s}" for c in columns)
    lines = [head, "-" * len(head)]
    for label in labels:
        cells = "".join(
            f"{'':>16s}" if rows.get(label) is None else f"{rows[label] / 60:16.2f}" for rows in per_run
        )
        lines.append(label.ljust(width) + cells)
    base = next((rows["total"] for c, rows in zip(columns, per_run) if c.name == reference), None)
    if base:
        lines.append(
            f"× {reference}".ljust(width)
            + "".join(f"{'':>16s}" if r["total"] is None else f"{r['total'] / base:16.2f}" for r in per_run)
        )
    shares = [fit_share(c.summary) for c in columns]
    lines.append(
        "fit share".ljust(width) + "".join(f"{'':>16s}" if s is None else f"{s:16.0%}" for s in shares)
    )
    return "\n".join(lines)


def run_seed(env: str, arm: str, seed: int, out: Path, files: list[str], extra: list[str]) -> Path:
    """Run (or resume, or read) one seed of table1-study's ``arm`` with more config ``files`` (after the env's
    and the method's) and ``extra`` overrides; its folder."""
    from prism.experiments.runner import Job, fit_command
    from prism.experiments.studies import load_preset

    preset = load_preset("table1-study")
    job = Job(env, arm, (seed,), False)
    command = fit_command(job, preset, out)
    run_dir = job.run_dir(out)
    if (run_dir / "summary.json").is_file():
        return run_dir
    if "--resume" not in command:
        at = command.index("--config") + 3  # after the env's and the method's files
        command = command[:at] + files + command[at:]
        command = command[:-1] + extra + command[-1:]  # before run_dir=, after the arm's own overrides
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True)
    return run_dir


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", required=True, help="walker, halfcheetah, swimmer or hopper")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="folder of the benchmark's runs")
    parser.add_argument("--steps-per-cycle", type=int, default=None, help="a smaller RL budget (M)")
    parser.add_argument(
        "--variant", action="append", default=[], metavar="NAME=OVERRIDES",
        help="a PRISM seed with more overrides (comma-separated key=value or conf files), e.g. fast=conf/fit/fast.yaml",
    )  # fmt: skip
    parser.add_argument("--no-baseline", action="store_true", help="skip e-prism-fast (variants only)")
    parser.add_argument(
        "--column", action="append", default=[], metavar="NAME=RUN_DIR",
        help="also print a finished run of elsewhere (e.g. a grid's seed run with the same budget)",
    )  # fmt: skip
    parser.add_argument("--report-only", action="store_true", help="print the table of the runs in --out")
    args = parser.parse_args()
    budget = [] if args.steps_per_cycle is None else [f"loop.steps_per_cycle={args.steps_per_cycle}"]
    plan = [("e-oracle", "e-oracle", [])]
    if not args.no_baseline:
        plan.append(("e-prism-fast", "e-prism-fast", []))
    for text in args.variant:
        name, _, overrides = text.partition("=")
        if not name or not overrides:
            raise SystemExit(f"bench_seed_cost: --variant {text!r}: expected NAME=OVERRIDES")
        plan.append((name, "e-prism-fast", overrides.split(",")))
    columns = []
    for name, arm, extra in plan:
        out = args.out / name
        run_dir = out / args.env / arm / f"seed{args.seed}"
        if not args.report_only:
            files = [e for e in extra if e.endswith((".yaml", ".yml"))]
            keys = [e for e in extra if e not in files]
            run_dir = run_seed(
                args.env, arm, args.seed, out, [str(Path(f).resolve()) for f in files], keys + budget
            )
        if (run_dir / "summary.json").is_file():
            columns.append(Column(name, json.loads((run_dir / "summary.json").read_text())))
    for text in args.column:
        name, _, folder = text.partition("=")
        summary = Path(folder) / "summary.json"
        if not name or not summary.is_file():
            raise SystemExit(f"bench_seed_cost: --column {text!r}: expected NAME=RUN_DIR of a finished run")
        columns.append(Column(name, json.loads(summary.read_text())))
    if not columns:
        raise SystemExit(f"bench_seed_cost: no finished run in {args.out}")
    print(format_table(columns))


if __name__ == "__main__":
    main()

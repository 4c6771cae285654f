"""What a finished run leaves in its folder, and what ``prism fit`` prints at the end.

Per member folder (the run folder itself for a single run): ``front.csv`` (per-weight returns of the final
evaluation, columns named after the objectives: :func:`front_columns`) and ``summary.json`` (marks the member done). A population adds ``summary.csv`` at the top: final
and best HV/EUM/VO per seed, then their mean ± standard error over seeds.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from prism.config.methods import run_label
from prism.core._text import counted
from prism.core.phase_clock import phase_breakdown
from prism.evaluation.records import eval_row
from prism.evaluation.result import EvalResult
from prism.run.clock import RunTimes
from prism.run.hparams import log_hparams
from prism.run.layout import SUMMARY_CSV, SUMMARY_JSON
from prism.run.members import Member, Run

METRICS = ("hv", "eum", "vo")


def final_protocol(member: Member) -> dict[str, int]:
    """The protocol of a member's final evaluation (what ``summary.json`` records)."""
    final = member.evaluation.config.final_protocol()
    return {"num_weights": final.num_weights, "episodes": final.episodes, "seed": final.reset_seed()}


def front_columns(objective_names: Sequence[str]) -> list[str]:
    """``front.csv``'s header: per objective (by name) the evaluation weight, the mean and population std
    of the discounted return (γ = ``eval.gamma``; what HV/EUM/VO use), the mean undiscounted return, then
    ``on_front`` (1 on the Pareto front of the discounted means)."""
    return [
        *(f"weight_{name}" for name in objective_names),
        *(f"discounted_return_mean_{name}" for name in objective_names),
        *(f"discounted_return_std_{name}" for name in objective_names),
        *(f"undiscounted_return_mean_{name}" for name in objective_names),
        "on_front",
    ]


def user_fit_records(records: list[dict]) -> list[dict]:
    """The fit records as ``summary.json`` lists them: ``cycle`` counted from 1, as the progress lines, the
    TensorBoard folders (``tb/reward_fit/cycle<c>``) and the reports count it (the loop and its checkpoint
    count from 0)."""
    return [{**record, "cycle": int(record["cycle"]) + 1} for record in records]


def write_final_outputs(run: Run, times: RunTimes) -> None:
    """Every member's ``front.csv`` and ``summary.json`` and its HParams summary in TensorBoard
    (:mod:`prism.run.hparams`), and a population's ``summary.csv``. ``times``: the run's training time
    (:mod:`prism.run.clock`), this process's and across its processes."""
    for member in run.members:
        _write_member_outputs(run, member, times)
        if member.evaluation.final_result is not None:
            log_hparams(member.logger, member.config, run.spec)  # TensorBoard's HParams tab
    if run.population:
        write_population_summary(run.run_dir, [m.run_dir for m in run.members])


def _write_member_outputs(run: Run, member: Member, times: RunTimes) -> None:
    result = member.evaluation.final_result
    if result is None:
        return
    write_front_csv(member.run_dir / "front.csv", result, run.spec.objective_names)
    final = eval_row(result, run.spec.objective_names, run.agent.env_step_count)
    summary = {
        "method": run_label(run.config),
        "env": run.spec.id,
        "seed": member.seed,
        "env_steps": run.agent.env_step_count,
        # Across every process that trained the run (resumes, continuations), counting the work the result is
        # made of; None when a checkpoint from before prism carried times was resumed (prism.run.clock).
        "wall_time_s": times.wall_s,
        "cpu_time_s": times.cpu_s,
        "wall_time_s_last_process": times.wall_s_this_process,
        # Where that time went (prism.core.phase_clock): collections, fits, evaluations, and the rest (RL).
        "phase_times": phase_breakdown(run.phases.state_dict(), times.cpu_s, times.wall_s),
        "final_protocol": final_protocol(member),
        "final": {k: v for k, v in final.items() if isinstance(v, (int, float))},
        # The env step at which the critic loss was flagged as diverging (None: never; prism.agents.divergence).
        "critic_divergence_step": run.agent.divergence_steps()[member.index],
        # One record per reward fit (prism.loop.phases.fit_record): store sizes, epochs, and the model's
        # quality on its validation split and on the episodes collected just before it (empty without a model).
        "reward_fits": user_fit_records(run.loop.state.member_fits(member.index)),
    }
    (member.run_dir / SUMMARY_JSON).write_text(json.dumps(summary, indent=2) + "\n")


def write_front_csv(path: Path, result: EvalResult, objective_names: Sequence[str]) -> None:
    """``front.csv`` of a final evaluation: one row per weight (:func:`front_columns`)."""
    on_front = {tuple(np.round(p, 12)) for p in np.asarray(result.front)}
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(front_columns(objective_names))
        for w, m, sd, um in zip(result.weights, result.mean, result.std, result.undiscounted_mean):
            flag = int(tuple(np.round(m, 12)) in on_front)
            writer.writerow([*map(float, w), *map(float, m), *map(float, sd), *map(float, um), flag])


def read_eval_rows(run_dir: Path) -> list[dict[str, str]]:
    path = run_dir / "eval.csv"
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def periodic_rows(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The periodic evaluations of ``eval.csv`` (every row of a file without the ``final`` flag).

    "Best" means the best of these everywhere (closing block, ``summary.csv``): the learning curve's best
    point, all with the same (periodic) protocol. The final evaluation uses another protocol (by default more
    weights and episodes) and is shown on its own as "final"; mixing it in would compare values measured
    differently."""
    return [r for r in rows if r.get("final") != "1"] or rows


def final_and_best(rows: list[dict[str, str]]) -> dict[str, float]:
    """``final_<m>`` from the final row (the last row for files without the flag) and ``best_<m>`` over the
    periodic rows (:func:`periodic_rows`), for m in HV/EUM/VO."""
    finals = [r for r in rows if r.get("final") == "1"]
    periodic = periodic_rows(rows)
    out: dict[str, float] = {}
    for key in METRICS:
        final_row = finals[-1] if finals else rows[-1]
        out[f"final_{key}"] = float(final_row[key]) if final_row[key] not in ("", None) else math.nan
        values = [float(r[key]) for r in periodic if r[key] not in ("", "nan", None)]
        out[f"best_{key}"] = max(values) if values else math.nan
    return out


def write_population_summary(run_dir: Path, member_dirs: list[Path]) -> Path:
    """``summary.csv``: one row per member seed (final and best HV/EUM/VO), then ``mean`` and ``se`` rows
    (standard error over seeds, ``std(ddof=1)/sqrt(n)``)."""
    rows = []
    for member_dir in member_dirs:
        eval_rows = read_eval_rows(member_dir)
        if not eval_rows:
            continue
        seed = (
            json.loads((member_dir / SUMMARY_JSON).read_text())["seed"]
            if (member_dir / SUMMARY_JSON).is_file()
            else member_dir.name.removeprefix("seed")
        )
        rows.append({"seed": str(seed), **final_and_best(eval_rows)})
    columns = [f"{kind}_{key}" for kind in ("final", "best") for key in METRICS]
    path = run_dir / SUMMARY_CSV
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["seed", *columns], lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        if rows:
            values = np.array([[r[c] for c in columns] for r in rows], dtype=float)
            se = (
                values.std(axis=0, ddof=1) / np.sqrt(len(rows))
                if len(rows) > 1
                else np.full(len(columns), np.nan)
            )
            writer.writerow({"seed": "mean", **dict(zip(columns, values.mean(axis=0)))})
            writer.writerow({"seed": "se", **dict(zip(columns, se))})
    return path


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def closing_summary(run: Run, times: RunTimes, *, resumed: bool = False) -> str:
    """The block ``prism fit`` prints when training is over: where the run is, how it ended, how to look.

    Final metrics are the end-of-run evaluation's (the final protocol); best ones are the best periodic
    evaluation's, over every periodic row of ``eval.csv`` (so a resumed run counts the evaluations of its
    earlier processes too) — the same meaning as ``summary.csv``'s ``best_*`` (:func:`final_and_best`). A population prints one block line
    per member and the mean ± standard error over seeds.
    """
    if not resumed:
        process = "this process"
    elif times.wall_s is None:
        process = "this process, resumed"
    else:
        process = f"this process, resumed; {_duration(times.wall_s)} in all"
    seeds = ", ".join(str(m.seed) for m in run.members)
    lines = [
        f"prism fit: done: {run_label(run.config)} on {run.spec.id}, seed{'s' if run.population else ''} {seeds}, "
        f"{run.agent.env_step_count} env steps, wall time {_duration(times.wall_s_this_process)} ({process})",
        f"  run folder   {run.run_dir}",
    ]
    for member in run.members:
        rows = read_eval_rows(member.run_dir)
        prefix = f"  seed {member.seed}: " if run.population else "  "
        finals = [r for r in rows if r.get("final") == "1"]
        if finals:
            protocol = final_protocol(member)
            final = finals[-1]
            lines.append(
                f"{prefix}final        HV {float(final['hv']):.6g}   EUM {float(final['eum']):.6g}   "
                f"VO {float(final['vo']):.6g}   ({counted(protocol['num_weights'], 'weight')} x "
                f"{counted(protocol['episodes'], 'episode')})"
            )
        if rows:
            periodic = periodic_rows(rows)

            def best(key: str, rows=periodic) -> str:
                valid = [r for r in rows if r[key] not in ("", "nan")]
                if not valid:
                    return "n/a"
                top = max(valid, key=lambda r: float(r[key]))
                return f"{float(top[key]):.6g} @ {top['env_steps']}"

            lines.append(
                f"{prefix}best         HV {best('hv')}   EUM {best('eum')}   VO {best('vo')}   "
                "(periodic evaluations, value @ env steps)"
            )
            if periodic:
                lines.append(f"{prefix}HV curve     {hv_curve(periodic)}   (the learning curve: eval/hv)")
        else:
            lines.append(f"{prefix}no evaluation was recorded")
    if run.population and (run.run_dir / SUMMARY_CSV).is_file():
        with (run.run_dir / SUMMARY_CSV).open(newline="") as fh:
            table = {r["seed"]: r for r in csv.DictReader(fh)}
        if "mean" in table:
            mean, se = table["mean"], table["se"]
            parts = [
                f"{k.upper()} {float(mean['final_' + k]):.6g} ± {float(se['final_' + k]):.3g}"
                for k in METRICS
            ]
            lines.append(f"  mean ± SE    final  {'   '.join(parts)}   ({run.run_dir / SUMMARY_CSV})")
    first, *more = what_to_look_at(run)
    lines += [f"  look at      {first}", *(f"{'':15}{line}" for line in more)]
    logdir = run.run_dir if run.population else run.run_dir / "tb"
    lines.append(f"  TensorBoard  tensorboard --logdir {logdir}")
    return "\n".join(lines)


def hv_curve(periodic: list[dict[str, str]], most: int = 6) -> str:
    """``4.5e+06 @ 2500 → 5.1e+06 @ 5000 → …``: the periodic evaluations' HV against env steps, at most
    ``most`` of them (the first, the last and evenly spaced ones between, ``…`` marking the gaps)."""
    picked = (
        sorted({round(i * (len(periodic) - 1) / (most - 1)) for i in range(most)})
        if len(periodic) > most
        else range(len(periodic))
    )
    parts, last = [], -1
    for i in picked:
        if i > last + 1:
            parts.append("…")
        row = periodic[i]
        parts.append(f"{float(row['hv']):.3g} @ {row['env_steps']}")
        last = i
    return " → ".join(parts)


def what_to_look_at(run: Run) -> list[str]:
    """The closing block's pointer for someone who has just run their first fit, one line each: which
    TensorBoard scalars and figures show the loop at work, and where the final front is."""
    looks = ["in TensorBoard: eval/hv against env steps (the HV curve above)"]
    if run.config.figures:
        looks.append("eval/front (the Pareto front at each evaluation)")
    if any((member.run_dir / "tb" / "reward_fit").is_dir() for member in run.members):
        looks.append("reward/val_correlation (how well each reward fit predicts the hidden reward)")
    fronts = [member.run_dir / "front.csv" for member in run.members]
    where = fronts[0] if len(fronts) == 1 else run.run_dir / "seed<N>" / "front.csv"
    return [*(f"{look}," for look in looks[:-1]), f"{looks[-1]};", f"the final Pareto front: {where}"]

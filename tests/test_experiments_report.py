"""prism reproduce's reports: a study that joins another study's arms reads them as its own cells without running
or copying them; the reward-fit diagnostics and the rliable aggregate match brute-force computations on synthetic
run folders. (That the committed studies recompute byte for byte: test_committed_reports.py.)"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from prism.experiments import cli, stats, studies
from prism.experiments.grid import JoinedArms
from prism.experiments.studies import load_preset, shipped

ROOT = Path(__file__).resolve().parents[1]


def test_ad_hoc_reports_default_to_runs_results_and_the_shim_takes_the_same_arguments(tmp_path):
    args = cli.build_parser().parse_args(["--preset", "smoke"])
    out, results = cli.grid_folders(args, False, False)
    assert (out, results) == (ROOT / "runs" / "reproduce" / "smoke", ROOT / "runs" / "results" / "smoke")
    args = cli.build_parser().parse_args(["--preset", "cpu-medium", "--protocol", "released"])
    assert cli.grid_folders(args, False, True)[1] == ROOT / "runs" / "results" / "cpu-medium-released"
    shim = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "reproduce.py"),
            "--preset",
            "smoke",
            "--dry-run",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shim.returncode == 0, shim.stderr
    lines = shim.stdout.strip().splitlines()
    assert len(lines) == 3 and all(" -m prism.cli fit --config " in line for line in lines)


# ---- synthetic run folders -----------------------------------------------------------------------------
OBJECTIVES = {"walker": ("forward", "energy"), "hopper": ("forward", "jump", "energy")}


def _fit_record(cycle: int, pearson: float, epochs: list[int], new_pearson: float | None) -> dict:
    quality = {"segment_sum_mse": 10.0 + cycle, "pearson": pearson, "pearson_non_final": pearson - 0.1}
    quality |= {"mean_predicted_terminal": 0.8, "mean_true_terminal": -0.5}
    quality |= {"mean_predicted_other": 1.0, "mean_true_other": 1.1}
    return {
        "cycle": cycle,
        "env_steps": 25_000 * cycle,
        "store": {
            "episodes": 100,
            "steps": 5000,
            "segments": 100,
            "train": {"episodes": 80},
            "validation": {"episodes": 20},
        },
        "epochs_run": epochs,
        "best_epoch": [e - 20 for e in epochs],
        "wall_time_s": 30.0 + cycle,
        "validation": quality,
        # held-out expert episodes exist from the second fit on (the first sees random episodes only)
        "validation_expert": None if cycle == 0 else {"pearson": pearson + 0.05},
        "new_episodes": None if new_pearson is None else {"pearson": new_pearson, "segment_sum_mse": 99.0},
    }


def write_run(
    run_dir: Path, env: str, hv: float, *, length: float = 500.0, fits: list[dict] | None = None
) -> None:
    """A finished run's config.yaml, eval.csv (two periodic rows and the final one), front.csv and
    summary.json, in the formats prism fit writes them."""
    run_dir.mkdir(parents=True)
    objectives = OBJECTIVES[env]
    header = ["env_steps", "hv", "eum", "vo", "cardinality"]
    header += [f"return_{o}" for o in objectives] + [f"undiscounted_return_{o}" for o in objectives]
    header += ["mean_episode_length", "equivariance_error", "final"]

    def row(steps: int, value: float, final: int) -> list:
        returns = [value / 1e5 + i for i in range(len(objectives))]
        return [
            steps,
            value,
            value / 1e5,
            value / 1e4,
            4,
            *returns,
            *[r * 5 for r in returns],
            length,
            0.5,
            final,
        ]

    with (run_dir / "eval.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerows([header, row(25_000, hv / 2, 0), row(50_000, hv * 0.9, 0), row(50_000, hv, 1)])
    n = len(objectives)
    front_header = [f"weight_{i}" for i in range(n)] + [f"mean_{i}" for i in range(n)]
    front_header += [f"std_{i}" for i in range(n)] + ["on_front"]
    with (run_dir / "front.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(front_header)
        writer.writerow([1.0] + [0.0] * (n - 1) + [10.0 + i for i in range(n)] + [0.1] * n + [1])
    summary = {"method": run_dir.parent.name, "seed": int(run_dir.name[4:]), "final": {"hv": hv}}
    if fits is not None:
        summary["reward_fits"] = fits
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / "config.yaml").write_text(f"seed: {summary['seed']}\nmethod: {run_dir.parent.name}\n")


HV = {  # (env, arm) -> final HV per seed 0..3
    ("walker", "e-oracle"): [100.0, 110.0, 90.0, 100.0],
    ("walker", "e-baseline"): [50.0, 60.0, 55.0, 45.0],
    ("walker", "e-prism"): [80.0, 120.0, 100.0, 95.0],
    ("walker", "e-uniform"): [70.0, 75.0, 100.0, 50.0],
    ("walker", "r-oracle"): [60.0, 62.0, 64.0, 66.0],
    ("walker", "r-prism"): [90.0, 91.0, 92.0, 93.0],
    ("walker", "e-rrd"): [85.0, 95.0, 90.0, 70.0],
    ("hopper", "e-oracle"): [200.0, 220.0, 180.0, 200.0],
    ("hopper", "e-baseline"): [100.0, 150.0, 100.0, 130.0],
    ("hopper", "e-prism"): [150.0, 250.0, 200.0, 150.0],  # ties with e-uniform's 150 and 200
    ("hopper", "e-uniform"): [150.0, 200.0, 210.0, 190.0],
}
PEARSON = {0: [0.5, 0.6, 0.7, 0.8], 1: [0.4, 0.5, 0.6, 0.7]}  # walker e-prism's validation Pearson per cycle


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """table1-study narrowed to walker (its own runs) and hopper (joined from a synthetic protocol study),
    seeds 0-3, in a temporary folder; its report written once: (own runs, joined runs, report, markdown)."""
    tmp_path = tmp_path_factory.mktemp("study")
    own, other = tmp_path / "grid", tmp_path / "protocol-study" / "runs"
    for (env, arm), values in HV.items():
        for seed, hv in enumerate(values):
            fits = None
            if (env, arm) == ("walker", "e-prism"):
                epochs = [[60, 100, 80], [40, 50, 60], [100, 100, 100], [30, 30, 30]][seed]
                fits = [
                    _fit_record(c, PEARSON[c][seed], epochs, None if c == 0 else 0.2 + seed / 10)
                    for c in (0, 1)
                ]
            write_run((other if env == "hopper" else own) / env / arm / f"seed{seed}", env, hv, fits=fits)
    base = load_preset("table1-study")
    preset = dataclasses.replace(
        base,
        envs=("walker", "hopper"),
        seeds=(0, 1, 2, 3),
        joined=tuple(dataclasses.replace(j, runs=str(other)) for j in base.joined),
    )
    before = sorted(p.relative_to(other) for p in other.rglob("*"))
    results = tmp_path / "report"
    with pytest.MonkeyPatch.context() as patch:
        shipped_study = studies.load_preset
        patch.setattr(
            studies, "load_preset", lambda name: preset if name == "table1-study" else shipped_study(name)
        )
        patch.setattr(stats, "AGGREGATE_RESAMPLES", 200)  # the intervals' width is not under test here
        output = io.StringIO()
        argv = ["--preset", "table1-study", "--report-only", "--out", str(own), "--results", str(results)]
        with contextlib.redirect_stdout(output):
            assert cli.main(argv) == 0
        # the joined runs are read, never written to
        assert sorted(p.relative_to(other) for p in other.rglob("*")) == before
        yield own, other, results, output.getvalue()


def test_table1_study_reads_hopper_from_the_protocol_study_without_running_or_copying_it(study, capsys):
    own, other, results, markdown = study
    rows = list(csv.DictReader((results / "table.csv").open()))
    arms = {(r["env"], r["method"]): r for r in rows if r["metric"] == "hv"}
    # each env's own arms only: no empty hopper rows for r-oracle, r-prism or e-prism-N1000
    assert sorted(m for e, m in arms if e == "mo-hopper-v5") == [
        "e-baseline",
        "e-oracle",
        "e-prism",
        "e-uniform",
    ]
    assert sorted(m for e, m in arms if e == "mo-walker2d-v5") == sorted(
        ["e-oracle", "e-baseline", "e-prism", "e-uniform", "r-oracle", "r-prism", "e-rrd"]
    )
    hopper_prism = arms[("mo-hopper-v5", "e-prism")]
    assert (
        hopper_prism["runs_from"] == "protocol-study"
        and arms[("mo-walker2d-v5", "e-prism")]["runs_from"] == ""
    )
    assert float(hopper_prism["final_mean"]) == pytest.approx(np.mean(HV[("hopper", "e-prism")]))
    assert hopper_prism["n_seeds"] == "4" and hopper_prism["paper_mean"] != ""  # beside the paper's number
    assert "| mo-hopper-v5 | e-prism ← protocol-study | equal | 4 | 50000 | HV |" in markdown
    # ratios: the four equal-budget ones per env, r-prism / r-oracle on walker only
    ratios = [
        (r["env"], r["numerator"], r["denominator"]) for r in csv.DictReader((results / "ratios.csv").open())
    ]
    assert ratios.count(("mo-hopper-v5", "r-prism", "r-oracle")) == 0
    assert ratios.count(("mo-walker2d-v5", "r-prism", "r-oracle")) == 3
    for pair in (
        ("e-prism", "e-oracle"),
        ("e-prism", "e-baseline"),
        ("e-uniform", "e-oracle"),
        ("e-prism", "e-uniform"),
    ):
        assert ratios.count(("mo-hopper-v5", *pair)) == 3
    # per-objective tables per env: hopper's three objectives, walker's two
    assert (
        "| env | method | protocol | n | episode length | forward (disc.) | jump (disc.) | energy (disc.) |"
        in markdown
    )
    assert "| env | method | protocol | n | episode length | forward (disc.) | energy (disc.) |" in markdown
    # the joined runs are neither copied into this report nor touched; its own runs are copied
    assert not (results / "runs" / "hopper").exists()
    assert (results / "runs" / "walker" / "e-prism" / "seed3" / "summary.json").is_file()
    # and never run: the grid's jobs are walker's only
    # (The fake runs' configs are not the grid's, so a dry run over them is refused: plan into an empty folder.)
    empty = own.parent / "empty"
    assert cli.main(["--preset", "table1-study", "--dry-run", "--out", str(empty)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 7 * 4 and not any("/hopper/" in line or "hopper.yaml" in line for line in lines)
    assert all(" -m prism.cli fit " in line for line in lines)  # walker's 7 arms × 4 seeds, nothing of hopper


def test_fit_diagnostics_per_arm_and_cycle_match_the_records(study):
    _, _, results, _ = study
    fits = list(csv.DictReader((results / "fits.csv").open()))
    walker = [r for r in fits if r["env"] == "mo-walker2d-v5" and r["arm"] == "e-prism"]
    # counted from 1 (the records of these synthetic runs, as of older prism, say 0 and 1)
    assert [r["cycle"] for r in walker] == ["1", "2"] and all(r["n"] == "4" for r in walker)
    for row, cycle in zip(walker, (0, 1)):
        values = np.array(PEARSON[cycle])
        se = values.std(ddof=1) / np.sqrt(len(values))
        assert row["val Pearson"] == f"{values.mean():.2f} ± {se:.2f}"
    all_epochs = [60, 100, 80, 40, 50, 60, 100, 100, 100, 30, 30, 30]
    assert walker[0]["epochs run (median)"] == f"{np.median(all_epochs):g}"
    assert walker[0]["store episodes (train / val)"] == "80 / 20"
    assert walker[0]["new episodes, previous model: Pearson"] == "—"  # the first fit has no previous model
    assert walker[0]["val expert episodes: Pearson"] == "—"  # nor expert episodes
    expert = np.array(PEARSON[1]) + 0.05
    assert walker[1]["val expert episodes: Pearson"] == f"{expert.mean():.2f} ± {expert.std(ddof=1) / 2:.2f}"
    new = np.array([0.2, 0.3, 0.4, 0.5])
    assert (
        walker[1]["new episodes, previous model: Pearson"] == f"{new.mean():.2f} ± {new.std(ddof=1) / 2:.2f}"
    )
    # hopper's e-prism runs predate the records: one row of "—"; arms without a reward model get none
    hopper = [r for r in fits if r["env"] == "mo-hopper-v5"]
    assert [r["arm"] for r in hopper] == ["e-prism ← protocol-study"]
    assert hopper[0]["val Pearson"] == "—" and hopper[0]["epochs run (median)"] == "—"
    assert not any("oracle" in r["arm"] or "uniform" in r["arm"] for r in fits)


def _brute_iqm(matrix: np.ndarray) -> float:
    pooled = np.sort(matrix.ravel())
    quarter = len(pooled) // 4
    return float(pooled[quarter : len(pooled) - quarter].mean())


def _brute_improvement(x: np.ndarray, y: np.ndarray) -> float:
    per_env = []
    for env in range(x.shape[1]):
        wins = [1.0 if a > b else 0.5 if a == b else 0.0 for a in x[:, env] for b in y[:, env]]
        per_env.append(sum(wins) / len(wins))
    return sum(per_env) / len(per_env)


def test_rliable_aggregate_of_the_study_matches_brute_force(study):
    _, _, results, markdown = study
    normalised = {
        arm: np.stack(
            [np.array(HV[(env, arm)]) / np.mean(HV[(env, "e-oracle")]) for env in ("walker", "hopper")], 1
        )
        for arm in ("e-oracle", "e-baseline", "e-prism", "e-uniform")
    }
    rows = list(csv.DictReader((results / "aggregate.csv").open()))
    iqm = {r["x"]: r for r in rows if r["statistic"] == "iqm"}
    assert set(iqm) == set(normalised)
    for arm, matrix in normalised.items():
        assert float(iqm[arm]["value"]) == pytest.approx(_brute_iqm(matrix))
        assert float(iqm[arm]["ci_low"]) <= float(iqm[arm]["value"]) <= float(iqm[arm]["ci_high"])
    improvements = {(r["x"], r["y"]): r for r in rows if r["statistic"] == "probability_of_improvement"}
    assert set(improvements) == {
        ("e-prism", "e-uniform"),
        ("e-prism", "e-baseline"),
        ("e-uniform", "e-baseline"),
    }
    for (x, y), row in improvements.items():
        assert float(row["value"]) == pytest.approx(_brute_improvement(normalised[x], normalised[y]))
        assert 0.0 <= float(row["ci_low"]) <= float(row["value"]) <= float(row["ci_high"]) <= 1.0
    assert (results / "aggregate.png").stat().st_size > 0
    assert "Aggregate over mo-walker2d-v5, mo-hopper-v5, computed with rliable" in markdown


def test_a_named_aggregate_covers_only_the_envs_its_arms_ran_in_and_matches_brute_force(study):
    # table1-study's rrd aggregate: e-rrd ran on walker2d and swimmer only, so hopper (which the main aggregate
    # uses) stays out, and swimmer, with no runs in this study, is left out by the >= 2 runs rule.
    _, _, results, markdown = study
    arms = ("e-oracle", "e-baseline", "e-prism", "e-uniform", "e-rrd")
    normalised = {
        arm: (np.array(HV[("walker", arm)]) / np.mean(HV[("walker", "e-oracle")]))[:, None] for arm in arms
    }
    rows = list(csv.DictReader((results / "aggregate_rrd.csv").open()))
    iqm = {r["x"]: float(r["value"]) for r in rows if r["statistic"] == "iqm"}
    assert iqm == pytest.approx({arm: _brute_iqm(matrix) for arm, matrix in normalised.items()})
    improvements = {
        (r["x"], r["y"]): float(r["value"]) for r in rows if r["statistic"] == "probability_of_improvement"
    }
    pairs = (("e-prism", "e-rrd"), ("e-rrd", "e-uniform"), ("e-rrd", "e-baseline"))
    assert improvements == pytest.approx(
        {(x, y): _brute_improvement(normalised[x], normalised[y]) for x, y in pairs}
    )
    assert (
        "Aggregate of e-oracle, e-baseline, e-prism, e-uniform, e-rrd over mo-walker2d-v5, computed"
        in markdown
    )
    assert "Figure: `aggregate_rrd.png`" in markdown and (results / "aggregate_rrd.png").stat().st_size > 0
    # the main aggregate is untouched by it: still over both envs, without e-rrd
    main = {r["x"] for r in csv.DictReader((results / "aggregate.csv").open()) if r["statistic"] == "iqm"}
    assert "e-rrd" not in main


def test_a_missing_rliable_is_one_line_naming_the_extra_and_writes_nothing(
    study, tmp_path, capsys, monkeypatch
):
    own, _, _, _ = study
    results = tmp_path / "report"
    monkeypatch.setitem(sys.modules, "rliable", None)  # `import rliable` now raises ImportError
    argv = ["--preset", "table1-study", "--report-only", "--out", str(own), "--results", str(results)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rliable" in err[0] and '.[report]"' in err[0]
    assert not results.exists()


def test_every_joined_arm_is_one_of_its_envs_arms_and_reads_a_committed_folder():
    for name in shipped():
        preset = load_preset(name)
        for join in preset.joined:
            assert isinstance(join, JoinedArms)
            assert set(join.arms) <= set(preset.methods_for(join.env)), name
            assert join.env in preset.envs and join.folder().is_dir(), name
    t1 = load_preset("table1-study")
    assert t1.methods_for("hopper") == ("e-oracle", "e-baseline", "e-prism", "e-uniform")
    assert all(c.source is not None for c in t1.cells() if c.env == "hopper")
    budget = load_preset("reward-budget")
    assert {c.method for c in budget.cells() if c.source is not None} == {"e-prism", "e-uniform", "e-oracle"}


def test_a_joined_arm_with_its_own_seeds_reads_those_and_the_grids_own_arms_keep_the_grids():
    """table1-paper reads halfcheetah-paper's oracle with the ten seeds that study's report uses, while every
    arm it runs itself (and the other joined arms) keeps its five."""
    preset = load_preset("table1-paper")
    cells = preset.cells()
    oracle = [c for c in cells if (c.env, c.method) == ("halfcheetah", "e-oracle")]
    assert [c.seed for c in oracle] == list(range(10))
    own_oracle = [
        c
        for c in load_preset("halfcheetah-paper").cells()
        if (c.env, c.method) == ("halfcheetah", "e-oracle")
    ]
    assert [c.run_dir(ROOT / "unused") for c in oracle] == [
        c.run_dir(ROOT / "docs/results/halfcheetah-paper/runs") for c in own_oracle
    ]
    assert all((c.run_dir(ROOT / "unused") / "summary.json").is_file() for c in oracle)
    assert {c.seed for c in cells if c.env == "halfcheetah" and c.method != "e-oracle"} == set(range(5))
    assert {c.seed for c in cells if c.source is None} == set(range(5))
    # Without its seeds the join reads the grid's five.
    plain = dataclasses.replace(preset, joined=tuple(dataclasses.replace(j, seeds=()) for j in preset.joined))
    assert {c.seed for c in plain.cells() if c.env == "halfcheetah"} == set(range(5))


def test_healthy_bonus_envs_are_those_whose_gymnasium_env_pays_one():
    """The objective tables' "net of survival" columns rest on this set: check it against gymnasium's own envs."""
    import mo_gymnasium

    from prism.experiments.grid import ENV_FILES, HEALTHY_BONUS_ENVS

    paid = set()
    for name, env_id in ENV_FILES.items():
        env = mo_gymnasium.make(env_id)
        if getattr(env.unwrapped, "healthy_reward", 0.0) == 1.0:
            paid.add(name)
        env.close()
    assert paid == set(HEALTHY_BONUS_ENVS)


def test_net_of_survival_columns_only_where_every_objective_pays_a_healthy_bonus():
    """Walker's table subtracts the episode length from each undiscounted return; halfcheetah's (no bonus, 1000
    steps always) has no such column rather than every return minus 1000."""
    from prism.experiments.tables import objective_table

    preset = dataclasses.replace(load_preset("table1-study"), envs=("walker", "halfcheetah"), seeds=(0, 1))
    entry = {
        "seeds": [0, 1],
        "final_mean_episode_length": [100.0, 300.0],
        "final_return_forward": [1.0, 2.0],
        "final_return_energy": [-1.0, -2.0],
        "final_undiscounted_return_forward": [150.0, 330.0],
        "final_undiscounted_return_energy": [90.0, 310.0],
    }
    table = {("walker", "e-oracle"): entry, ("halfcheetah", "e-oracle"): dict(entry)}
    lines = objective_table(preset, table)
    walker = next(line for line in lines if line.startswith("| mo-walker2d-v5"))
    cheetah = next(line for line in lines if line.startswith("| mo-halfcheetah-v5"))
    headers = [line for line in lines if line.startswith("| env |")]
    assert len(headers) == 2 and "(undisc. − length)" in headers[0] and "(undisc. − length)" not in headers[1]
    # walker: forward net of survival = mean(50, 30) = 40 ± 10; energy = mean(-10, 10) = 0 ± 10
    assert walker.split(" | ")[-2:] == ["40.00 ± 10.00", "0.00 ± 10.00 |"]
    assert len(walker.split(" | ")) == len(cheetah.split(" | ")) + 2


# ---- the smoke preset's report: one seed per arm (issue 50, item 7) ------------------------------------------
def _smoke_run(run_dir: Path, hv: float) -> None:
    """A finished one-seed run in today's formats: front.csv columns named after hopper's objectives."""
    write_run(run_dir, "hopper", hv)
    names = OBJECTIVES["hopper"]
    header = [f"weight_{o}" for o in names] + [f"discounted_return_mean_{o}" for o in names]
    header += [f"discounted_return_std_{o}" for o in names] + [f"undiscounted_return_mean_{o}" for o in names]
    with (run_dir / "front.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([*header, "on_front"])
        writer.writerow([1.0, 0.0, 0.0, 10.0, 1.0, 2.0, 0.1, 0.1, 0.1, 30.0, 3.0, 6.0, 1])
        writer.writerow([0.0, 1.0, 0.0, 4.0, 5.0, 2.5, 0.1, 0.1, 0.1, 12.0, 15.0, 7.0, 1])


def test_the_smoke_report_says_why_its_ratios_are_empty_and_names_the_objectives(tmp_path, monkeypatch):
    import matplotlib.figure

    out, results = tmp_path / "grid", tmp_path / "report"
    for arm, hv in (("oracle", 300.0), ("baseline", 100.0), ("prism", 200.0)):
        _smoke_run(out / "hopper" / arm / "seed0", hv)
    saved: dict[str, list[tuple[str, str, str]]] = {}

    def keep_labels(fig, path, *args, **kwargs):  # each figure's axes: (title, x label, y label)
        saved[Path(path).name] = [(ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes]

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep_labels)
    argv = ["--preset", "smoke", "--report-only", "--out", str(out), "--results", str(results)]
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(argv) == 0
    markdown = (results / "table.md").read_text()
    rows = [line for line in markdown.splitlines() if line.startswith("| mo-hopper-v5 | HV | ")]
    assert rows and all("| — | — | — |" in row for row in rows)  # ratio, CI and p: none with one seed
    # and no verdict either: "not distinguishable" would claim a test that never ran
    assert all(row.rstrip(" |").split(" | ")[-2] == "—" and "distinguishable" not in row for row in rows), (
        rows
    )
    assert (
        "— in a row: an arm it compares has fewer than 2 finished seeds, and the ratio of means, its bootstrap CI "
        "and Welch's p need at least 2 per arm (`ratios.csv` holds NaN there). Finished seeds: "
        "mo-hopper-v5 prism (1), mo-hopper-v5 baseline (1), mo-hopper-v5 oracle (1). The grid runs one seed per "
        "arm: its numbers check a set-up, they compare nothing."
    ) in markdown
    # the fronts' axes carry the env's objectives, as TensorBoard's front figure does, not "objective 0/1"
    (front_axes,) = saved["pareto_fronts.png"][:1]
    assert front_axes == (
        "mo-hopper-v5: final fronts of every seed (forward, jump)",
        "discounted return, forward",
        "discounted return, jump",
    )


def test_a_report_whose_arms_have_two_seeds_or_more_has_no_such_note(study):
    markdown = study[3]
    assert "fewer than 2 finished seeds" not in markdown


def test_an_aggregate_over_named_envs_leaves_out_the_other_envs_its_arms_ran_in(monkeypatch):
    """``Aggregate.envs`` bounds the envs an aggregate may use even where its arms have runs elsewhere: the
    report's aggregate over ``("a",)`` is the brute-force one of env a alone, and without ``envs`` it takes the
    preset's (a and b)."""
    from types import SimpleNamespace

    from prism.experiments.grid import Aggregate
    from prism.experiments.report import _aggregate

    monkeypatch.setattr(stats, "AGGREGATE_RESAMPLES", 100)
    hv = {
        ("a", "oracle"): [10.0, 10.0, 10.0, 10.0],
        ("a", "prism"): [12.0, 3.0, 9.0, 30.0],
        ("b", "oracle"): [2.0, 2.0, 2.0, 2.0],
        ("b", "prism"): [8.0, 8.0, 6.0, 9.0],  # far above its oracle: it would lift a's numbers
    }
    table = {key: {"final_hv": values} for key, values in hv.items()}
    preset = SimpleNamespace(envs=("a", "b"))
    only_a = Aggregate("oracle", ("oracle", "prism"), (("prism", "oracle"),), envs=("a",), name="a_only")
    result = _aggregate(preset, only_a, table)
    assert result.envs == ("a",) and result.runs == {"oracle": 4, "prism": 4}
    prism_a = np.array(hv[("a", "prism")])[:, None] / 10.0
    assert result.iqm["prism"].value == pytest.approx(_brute_iqm(prism_a))
    assert result.improvement[("prism", "oracle")].value == pytest.approx(
        _brute_improvement(prism_a, np.ones((4, 1)))
    )
    both = _aggregate(preset, dataclasses.replace(only_a, envs=(), name=""), table)
    assert both.envs == ("a", "b") and both.iqm["prism"].value != result.iqm["prism"].value


def test_uniform_rt_columns_appear_beside_the_models_pearson_only_when_runs_record_them(study):
    """Fit records that score uniform R/T on the same episodes (validation_uniform, new_episodes_uniform) add
    two columns, mean ± SE over seeds like the model's; a grid of older runs keeps its columns as they were
    (so its committed report recomputes unchanged)."""
    from prism.experiments.fits import FIT_COLUMNS, fit_rows

    _, _, results, _ = study
    older = list(csv.DictReader((results / "fits.csv").open()))
    assert list(older[0]) == list(FIT_COLUMNS)
    uniform_val = [0.1, 0.2, 0.3, 0.5]
    per_seed = []
    for seed in range(4):
        records = [_fit_record(c, PEARSON[c][seed], [50, 50, 50], None if c == 0 else 0.3) for c in (0, 1)]
        for c, record in enumerate(records):
            record["validation_uniform"] = {"pearson": uniform_val[seed] + c}
            record["new_episodes_uniform"] = None if c == 0 else {"pearson": -uniform_val[seed]}
        per_seed.append(records)
    preset = dataclasses.replace(load_preset("table1-study"), envs=("walker",))
    rows = fit_rows(preset, {("walker", "e-prism"): {"fits": per_seed}})
    assert list(rows[0]) == [*FIT_COLUMNS, "val uniform R/T: Pearson", "new episodes, uniform R/T: Pearson"]
    values = np.array(uniform_val)
    se = f"{values.std(ddof=1) / 2:.2f}"
    assert [r["val uniform R/T: Pearson"] for r in rows] == [
        f"{values.mean():.2f} ± {se}",
        f"{values.mean() + 1:.2f} ± {se}",
    ]
    assert [r["new episodes, uniform R/T: Pearson"] for r in rows] == ["—", f"{-values.mean():.2f} ± {se}"]

"""prism reproduce (prism/experiments/): final-row selection, the statistics of the verdict, jobs, the Ray
backend, and the report."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from prism.config import load_config, run_label
from prism.config.files import to_yaml
from prism.experiments import cli, runner
from prism.experiments.collect import paper_values, split_rows
from prism.experiments.grid import CONF, Arm, Cell, Preset, Ratio
from prism.experiments.report import write_report
from prism.experiments.runner import RUNNING_ELSEWHERE, Job, fit_command, fresh_arguments, make_jobs, run_job
from prism.experiments.stats import compare
from prism.experiments.studies import load_preset
from prism.run.lock import locked_elsewhere, run_dir_lock

ROOT = Path(__file__).resolve().parents[1]


def test_final_row_is_the_flagged_one_and_best_is_over_periodic_rows():
    rows = [
        {"env_steps": 100.0, "hv": 5.0, "final": 0.0},
        {"env_steps": 200.0, "hv": 9.0, "final": 0.0},
        {"env_steps": 200.0, "hv": 7.0, "final": 1.0},
    ]
    periodic, final = split_rows(rows)
    assert final["hv"] == 7.0
    assert [r["hv"] for r in periodic] == [5.0, 9.0]
    # eval.csv from before the final-evaluation rule: the last row stands for the final one
    legacy = [{"env_steps": 100.0, "hv": 5.0}, {"env_steps": 200.0, "hv": 6.0}]
    periodic, final = split_rows(legacy)
    assert final["hv"] == 6.0 and len(periodic) == 2


def test_compare_matches_welch_by_hand_and_bootstrap_brackets_the_ratio():
    a = [10.0, 12.0, 11.0, 13.0, 12.5]
    b = [5.0, 6.5, 5.5, 7.0, 4.0]
    st = compare(a, b)
    x, y = np.array(a), np.array(b)
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    t = (x.mean() - y.mean()) / math.sqrt(vx + vy)
    df = (vx + vy) ** 2 / (vx**2 / (len(x) - 1) + vy**2 / (len(y) - 1))
    # two-sided p from the Student-t survival function, by numerical integration of the density
    grid = np.linspace(abs(t), abs(t) + 200, 400_001)
    density = (
        math.gamma((df + 1) / 2)
        / (math.sqrt(df * math.pi) * math.gamma(df / 2))
        * (1 + grid**2 / df) ** (-(df + 1) / 2)
    )
    p_by_hand = 2 * np.trapezoid(density, grid)
    assert st["p_welch"] == pytest.approx(p_by_hand, rel=1e-3)
    assert st["ratio"] == pytest.approx(x.mean() / y.mean())
    assert st["ci_low"] < st["ratio"] < st["ci_high"]
    assert st["ci_low"] > 1.0  # clearly separated groups: the CI excludes "no difference"
    same = compare(a, a)
    assert same["ratio"] == 1.0 and same["p_welch"] == pytest.approx(1.0)
    assert same["ci_low"] < 1.0 < same["ci_high"]


def test_ray_backend_without_ray_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    code = cli.main(
        [
            "--preset",
            "smoke",
            "--backend",
            "ray",
            "--out",
            str(tmp_path / "g"),
            "--results",
            str(tmp_path / "r"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "pip install -e" in err[0] and "[cluster]" in err[0]
    assert not (tmp_path / "r").exists()


def test_jobs_are_one_population_per_cell_unless_per_seed_runs_exist(tmp_path):
    cells = [Cell("hopper", m, s) for s in (0, 1, 2) for m in ("oracle", "prism")]
    jobs = make_jobs(cells, tmp_path, per_seed=False)
    assert [(j.method, j.seeds, j.population) for j in jobs] == [
        ("oracle", (0, 1, 2), True),
        ("prism", (0, 1, 2), True),
    ]
    assert fit_command(jobs[0], load_preset("smoke"), tmp_path)[-2] == "seeds=[0,1,2]"
    assert jobs[0].run_dir(tmp_path) == tmp_path / "hopper" / "oracle"
    # an older per-seed grid in the same folder is completed seed by seed, its finished runs skipped
    finished = tmp_path / "hopper" / "prism" / "seed1"
    finished.mkdir(parents=True)
    (finished / "summary.json").write_text("{}")
    jobs = make_jobs(cells, tmp_path, per_seed=False)
    assert [(j.method, j.seeds, j.population) for j in jobs] == [
        ("oracle", (0, 1, 2), True), ("prism", (0,), False), ("prism", (2,), False)
    ]  # fmt: skip
    per_seed = make_jobs(cells, tmp_path, per_seed=True)
    assert len(per_seed) == 6 and fit_command(per_seed[0], load_preset("smoke"), tmp_path)[-2] == "seed=0"


def test_a_run_another_process_is_writing_is_skipped_not_failed_and_the_grid_exits_3(
    tmp_path, monkeypatch, capsys
):
    # flock locks belong to an open file description, so the probe's own open sees this test's lock as
    # another writer's, exactly as it sees a second driver's.
    run_dir = tmp_path / "g" / "hopper" / "oracle" / "seed0"
    run_dir.mkdir(parents=True)
    assert not locked_elsewhere(run_dir) and not locked_elsewhere(tmp_path / "missing")

    def no_launch(*args, **kwargs):
        raise AssertionError("a locked run folder must not get a prism fit process")

    monkeypatch.setattr(runner.subprocess, "call", no_launch)
    with run_dir_lock(run_dir, key="run_dir"):
        assert locked_elsewhere(run_dir)
        job = Job("hopper", "oracle", (0,), False)
        assert run_job(job, load_preset("smoke"), tmp_path / "g") == (job, RUNNING_ELSEWHERE, 0.0)
        argv = ["--preset", "smoke", "--methods", "oracle", "--per-seed-processes"]
        code = cli.main([*argv, "--out", str(tmp_path / "g"), "--results", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert code == 3
    assert f"skipped, another process is writing {run_dir}" in out and "FAILED" not in out
    assert "failed runs: 0; running elsewhere: 1" in out
    assert not locked_elsewhere(run_dir) and list(run_dir.iterdir()) == []  # released, nothing written


def test_a_child_refused_by_the_lock_counts_as_running_elsewhere_but_a_plain_failure_stays_one(
    tmp_path, monkeypatch
):
    """The other writer can take the folder between run_job's check and its child's start: the child is
    refused by the run's own lock (exit 2), and the job is "running elsewhere", not failed."""
    job = Job("hopper", "oracle", (0,), False)
    run_dir = job.run_dir(tmp_path)
    run_dir.mkdir(parents=True)
    taken = []

    class Child:  # a `prism fit` child that exits 2, optionally after another writer took the folder
        take = True

        def __init__(self, *args, **kwargs):
            if Child.take:
                taken.append(run_dir_lock(run_dir, key="run_dir"))
                taken[-1].__enter__()

        def wait(self, timeout=None):
            return 2

    monkeypatch.setattr(runner.subprocess, "Popen", Child)
    try:
        assert run_job(job, load_preset("smoke"), tmp_path)[1] == RUNNING_ELSEWHERE
    finally:
        taken[-1].__exit__(None, None, None)
    Child.take = False
    assert run_job(job, load_preset("smoke"), tmp_path)[1] == 2


@pytest.mark.slow
def test_smoke_grid_on_a_local_ray_instance(tmp_path):
    pytest.importorskip("ray", reason="the cluster extra is installed in CI (.ci/run)")
    out, results = tmp_path / "grid", tmp_path / "results"
    command = [
        sys.executable,
        "-m",
        "prism.cli",
        "reproduce",
        "--preset",
        "smoke",
        "--backend",
        "ray",
        "--parallel",
        "2",
        "--out",
        str(out),
        "--results",
        str(results),
        "--set",  # what is checked is the backend, not the runs: small update batches, no eval workers
        "agent.batch_size=32",
        "eval.num_workers=0",
    ]
    first = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert first.stdout.count(": ok ") == 3
    with (results / "table.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["method"] for r in rows} == {"oracle", "baseline", "prism"}
    assert all(r["n_seeds"] == "1" and r["env_steps"] == "600" for r in rows)
    for method in ("oracle", "baseline", "prism"):
        eval_rows = list(csv.DictReader((out / "hopper" / method / "seed0" / "eval.csv").open()))
        assert eval_rows[-1]["final"] == "1"
    # Re-submission skips finished runs.
    second = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0
    assert "3 of 3 runs already finished; running 0 processes" in second.stdout


def test_backbone_dimension_adds_the_agent_group_and_reads_the_papers_gpi_pd_table(tmp_path):
    smoke = load_preset("smoke")
    gpi = Preset(**{**smoke.__dict__, "backbone": "gpi_pd"})
    job = Job("hopper", "prism", (0,), False)
    command = fit_command(job, gpi, tmp_path)
    method_at = command.index(str(CONF / "method" / "prism.yaml"))
    assert command[method_at + 1] == str(CONF / "agent" / "gpi_pd.yaml")  # after the method overlay
    assert str(CONF / "agent" / "gpi_pd.yaml") not in fit_command(job, smoke, tmp_path)
    # the paper's GPI-PD appendix table, not the CAPQL main table: hopper HV, oracle 1.65e7 vs CAPQL 1.30e7
    assert paper_values("gpi_pd")[("mo-hopper-v5", "Oracle", "hv")][0] == pytest.approx(1.65e7)
    assert paper_values("capql")[("mo-hopper-v5", "Oracle", "hv")][0] == pytest.approx(1.30e7)


def test_dry_run_lists_the_commands_a_run_would_start_and_comments_out_the_runs_it_would_skip(
    tmp_path, capsys
):
    grid = tmp_path / "g"
    finished, interrupted, held = (grid / "hopper" / m / "seed0" for m in ("oracle", "baseline", "prism"))
    for folder in (finished, interrupted, held):
        folder.mkdir(parents=True)
        job = Job("hopper", folder.parent.name, (0,), False)
        config = load_config(
            *fresh_arguments(job, load_preset("smoke"), grid)
        )  # as the run wrote it at start
        (folder / "config.yaml").write_text(to_yaml(config))
    (finished / "summary.json").write_text("{}")
    argv = ["--preset", "smoke", "--per-seed-processes", "--seeds", "0", "1", "--dry-run", "--out", str(grid)]
    with run_dir_lock(held, key="run_dir"):
        assert cli.main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    by_folder = {line.rsplit(" ", 1)[-1].removeprefix("run_dir="): line for line in lines}
    assert len(lines) == len(by_folder) == 6  # 3 methods × 2 seeds, each once
    assert by_folder[str(finished)] == f"# finished: {finished}"
    assert by_folder[str(held)] == f"# running elsewhere (left to that process): {held}"
    assert by_folder[str(interrupted)].endswith(f"prism.cli fit --resume {interrupted}")
    fresh = [line for line in lines if not line.startswith("#") and "--resume" not in line]
    assert len(fresh) == 3 and all(line.endswith("/seed1") and " seed=1 " in line for line in fresh)


def test_a_preset_carries_its_backbone_and_the_flag_overrides_it(tmp_path, capsys):
    assert cli.main(["--preset", "gpi-pd-small", "--dry-run", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 9  # 3 methods × 3 seeds, one process per seed (GPI-PD)
    assert all("agent/gpi_pd.yaml" in line and "agent.gradient_updates=5" in line for line in lines)
    assert (
        cli.main(["--preset", "gpi-pd-small", "--backbone", "capql", "--dry-run", "--out", str(tmp_path)])
        == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines and not any("agent/gpi_pd.yaml" in line for line in lines)


def _resolved(command: list[str]):
    """The prism config a ``prism fit --config FILES... OVERRIDES...`` command line resolves to."""
    args = command[command.index("--config") + 1 :]
    files = [a for a in args if a.endswith(".yaml") and "=" not in a]
    overrides = [a for a in args if "=" in a]
    return load_config(files, overrides)


def test_protocol_study_arms_resolve_to_the_issue_table(tmp_path):
    """Each arm of the study's grid, as the command line reproduce.py runs it: budget, reward, agent, λ."""
    preset = load_preset("protocol-study")
    expected = {  # arm: (protocol, env steps, dense env, reward, actor, λ)
        "r-oracle": ("released", 25_000, True, "none", [256, 256], 0.0),
        "r-baseline": ("released", 25_000, False, "none", [256, 256], 0.0),
        "r-prism": ("released", 50_000, False, "resymnet", [256, 256, 256], 1.0),
        "r-uniform": ("released", 50_000, False, "uniform", [256, 256, 256], 1.0),
        "d-oracle-plus": ("equal", 50_000, True, "none", [256, 256, 256], 1.0),
        "d-oracle-layer": ("equal", 50_000, True, "none", [256, 256, 256], 0.0),
        "e-oracle": ("equal", 50_000, True, "none", [256, 256], 0.0),
        "e-baseline": ("equal", 50_000, False, "none", [256, 256], 0.0),
        "e-prism": (
            "equal",
            50_000,
            False,
            "resymnet",
            [256, 256],
            0.01,
        ),  # null in the files: hopper's spec λ
        "e-uniform": ("equal", 50_000, False, "uniform", [256, 256], 0.01),
    }
    assert set(preset.methods) == set(expected)
    for arm, (protocol, steps, dense, reward, actor, lam) in expected.items():
        job = Job("hopper", arm, (0, 1, 2, 3, 4), True)
        config = _resolved(fit_command(job, preset, tmp_path))
        assert config.protocol == protocol, arm
        assert config.loop.cycles * config.loop.steps_per_cycle == steps, arm
        assert config.env.dense == dense and config.reward.name == reward, arm
        assert config.agent.actor_hidden == actor and config.agent.symreg_lambda == lam, arm
        assert run_label(config) == arm and config.seeds == [0, 1, 2, 3, 4], arm
        assert (config.loop.initial_episodes, config.loop.expert_episodes, config.reward.max_epochs) == (
            1000,
            50,
            100,
        )
        assert (config.eval.final.num_weights, config.eval.final.episodes) == (100, 5)


def test_protocol_flag_applies_to_every_arm_and_gets_its_own_grid_folder(tmp_path, capsys):
    original = load_preset("cpu-medium")
    assert cli.main(["--preset", "cpu-medium", "--protocol", "released", "--dry-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and all("protocol=released" in line for line in lines)
    assert all("/reproduce/cpu-medium-released/" in line for line in lines)  # never resumes an equal grid
    assert load_preset("cpu-medium") == original  # a flag changes this grid, never the shipped preset
    assert cli.main(["--preset", "cpu-medium", "--dry-run", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert all("protocol=equal" in line for line in lines)
    # a preset whose arms pin their protocol refuses the flag, in one line
    assert cli.main(["--preset", "protocol-study", "--protocol", "equal", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prism reproduce: error: --protocol:")


def _fake_run(run_dir: Path, finals: dict[str, float], length: float) -> None:
    run_dir.mkdir(parents=True)
    header = [
        "env_steps",
        "hv",
        "eum",
        "vo",
        "return_forward",
        "undiscounted_return_forward",
        "mean_episode_length",
        "final",
    ]
    rows = [
        [100, finals["hv"] / 2, 1.0, 1.0, 1.0, 2.0, length, 0],
        [200, finals["hv"], finals["eum"], finals["vo"], finals["ret"], finals["ret"] * 2, length, 1],
    ]
    with (run_dir / "eval.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    (run_dir / "summary.json").write_text("{}")
    (run_dir / "config.yaml").write_text("method: x\n")


def test_report_names_each_rows_protocol_computes_the_presets_ratios_and_copies_run_files(tmp_path):
    preset = Preset(
        envs=("hopper",),
        methods=("r-prism", "r-oracle"),
        seeds=(0, 1, 2),
        overrides=(),
        description="test",
        arms=(Arm("r-prism", "prism", "released"), Arm("r-oracle", "oracle", "released")),
        ratios=(Ratio("r-prism", "r-oracle", "headline"),),
    )
    out, results = tmp_path / "grid", tmp_path / "results"
    prism_hv, oracle_hv = [3.0, 4.0, 5.0], [2.0, 2.0, 2.5]
    for seed in preset.seeds:
        _fake_run(
            out / "hopper" / "r-prism" / f"seed{seed}",
            {"hv": prism_hv[seed], "eum": seed, "vo": seed, "ret": 10.0 + seed},
            50.0,
        )
        _fake_run(
            out / "hopper" / "r-oracle" / f"seed{seed}",
            {"hv": oracle_hv[seed], "eum": 1 + seed, "vo": 1 + seed, "ret": 5.0},
            40.0,
        )
    cells = [Cell("hopper", m, s) for s in preset.seeds for m in preset.methods]
    markdown = write_report("unit-test", preset, cells, out, results)
    rows = list(csv.DictReader((results / "table.csv").open()))
    assert {r["protocol"] for r in rows} == {"released"}
    ratio = next(r for r in csv.DictReader((results / "ratios.csv").open()) if r["metric"] == "hv")
    assert float(ratio["ratio"]) == pytest.approx(np.mean(prism_hv) / np.mean(oracle_hv))
    assert (ratio["numerator"], ratio["denominator"], ratio["protocols"]) == (
        "r-prism",
        "r-oracle",
        "released / released",
    )
    # the paper's PRISM/oracle HV ratio (1.58e7 / 1.30e7) beside ours
    assert "| r-prism / r-oracle | released / released | headline |" in markdown and "| 1.22 |" in markdown
    # per-objective table: undiscounted return of r-prism = 2 × (10, 11, 12); net of the healthy bonus: − 50
    objective_row = next(
        line
        for line in markdown.splitlines()
        if line.startswith("| mo-hopper-v5 | r-prism | released | 3 | 50.00")
    )
    assert "22.00 ± 1.15" in objective_row and "-28.00 ± 1.15" in objective_row
    for seed in preset.seeds:
        copied = results / "runs" / "hopper" / "r-prism" / f"seed{seed}"
        assert (copied / "eval.csv").read_bytes() == (
            out / "hopper" / "r-prism" / f"seed{seed}" / "eval.csv"
        ).read_bytes()
        assert (copied / "config.yaml").is_file() and (copied / "summary.json").is_file()


def test_an_arm_marked_per_seed_runs_one_process_per_seed_beside_populations(tmp_path):
    preset = load_preset("protocol-study")
    cells = [Cell("hopper", m, s) for s in preset.seeds for m in preset.methods]
    per_seed = frozenset(m for m in preset.methods if preset.arm(m).per_seed)
    assert per_seed == {"r-prism", "e-prism"}
    jobs = make_jobs(cells, tmp_path, per_seed=False, per_seed_methods=per_seed)
    assert [(j.method, j.population) for j in jobs if j.method == "r-prism"] == [("r-prism", False)] * 5
    assert [j.seeds for j in jobs if j.method == "r-oracle"] == [(0, 1, 2, 3, 4)]
    assert len(jobs) == (len(preset.methods) - 2) + 2 * 5  # one population per arm, one job per PRISM seed
    assert jobs[0].method == "r-oracle" and jobs[2].method == "r-prism"  # the study's order: new cells first

"""tools/reproduce.py: final-row selection, the statistics of the verdict, and the Ray backend."""

from __future__ import annotations

import csv
import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("prism_reproduce_tool", ROOT / "tools" / "reproduce.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


reproduce = _load()


def test_final_row_is_the_flagged_one_and_best_is_over_periodic_rows():
    rows = [
        {"env_steps": 100.0, "hv": 5.0, "final": 0.0},
        {"env_steps": 200.0, "hv": 9.0, "final": 0.0},
        {"env_steps": 200.0, "hv": 7.0, "final": 1.0},
    ]
    periodic, final = reproduce.split_rows(rows)
    assert final["hv"] == 7.0
    assert [r["hv"] for r in periodic] == [5.0, 9.0]
    # eval.csv from before the final-evaluation rule: the last row stands for the final one
    legacy = [{"env_steps": 100.0, "hv": 5.0}, {"env_steps": 200.0, "hv": 6.0}]
    periodic, final = reproduce.split_rows(legacy)
    assert final["hv"] == 6.0 and len(periodic) == 2


def test_compare_matches_welch_by_hand_and_bootstrap_brackets_the_ratio():
    a = [10.0, 12.0, 11.0, 13.0, 12.5]
    b = [5.0, 6.5, 5.5, 7.0, 4.0]
    st = reproduce.compare(a, b)
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
    same = reproduce.compare(a, a)
    assert same["ratio"] == 1.0 and same["p_welch"] == pytest.approx(1.0)
    assert same["ci_low"] < 1.0 < same["ci_high"]


def test_ray_backend_without_ray_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    code = reproduce.main(
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
    cells = [reproduce.Cell("hopper", m, s) for s in (0, 1, 2) for m in ("oracle", "prism")]
    jobs = reproduce.make_jobs(cells, tmp_path, per_seed=False)
    assert [(j.method, j.seeds, j.population) for j in jobs] == [
        ("oracle", (0, 1, 2), True),
        ("prism", (0, 1, 2), True),
    ]
    assert reproduce.fit_command(jobs[0], reproduce.PRESETS["smoke"], tmp_path)[-2] == "seeds=[0,1,2]"
    assert jobs[0].run_dir(tmp_path) == tmp_path / "hopper" / "oracle"
    # an older per-seed grid in the same folder is completed seed by seed, its finished runs skipped
    finished = tmp_path / "hopper" / "prism" / "seed1"
    finished.mkdir(parents=True)
    (finished / "summary.json").write_text("{}")
    jobs = reproduce.make_jobs(cells, tmp_path, per_seed=False)
    assert [(j.method, j.seeds, j.population) for j in jobs] == [
        ("oracle", (0, 1, 2), True), ("prism", (0,), False), ("prism", (2,), False)
    ]  # fmt: skip
    per_seed = reproduce.make_jobs(cells, tmp_path, per_seed=True)
    assert (
        len(per_seed) == 6
        and reproduce.fit_command(per_seed[0], reproduce.PRESETS["smoke"], tmp_path)[-2] == "seed=0"
    )


@pytest.mark.slow
def test_smoke_grid_on_a_local_ray_instance(tmp_path):
    pytest.importorskip("ray", reason="the cluster extra is installed in CI (.ci/run)")
    out, results = tmp_path / "grid", tmp_path / "results"
    command = [
        sys.executable,
        str(ROOT / "tools" / "reproduce.py"),
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
    smoke = reproduce.PRESETS["smoke"]
    gpi = reproduce.Preset(**{**smoke.__dict__, "backbone": "gpi_pd"})
    job = reproduce.Job("hopper", "prism", (0,), False)
    command = reproduce.fit_command(job, gpi, tmp_path)
    method_at = command.index(str(reproduce.CONF / "method" / "prism.yaml"))
    assert command[method_at + 1] == str(reproduce.CONF / "agent" / "gpi_pd.yaml")  # after the method overlay
    assert str(reproduce.CONF / "agent" / "gpi_pd.yaml") not in reproduce.fit_command(job, smoke, tmp_path)
    # the paper's GPI-PD appendix table, not the CAPQL main table: hopper HV, oracle 1.65e7 vs CAPQL 1.30e7
    assert reproduce.paper_values("gpi_pd")[("mo-hopper-v5", "Oracle", "hv")][0] == pytest.approx(1.65e7)
    assert reproduce.paper_values("capql")[("mo-hopper-v5", "Oracle", "hv")][0] == pytest.approx(1.30e7)


def test_a_preset_carries_its_backbone_and_the_flag_overrides_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(
        reproduce.PRESETS, "gpi-pd-small", reproduce.PRESETS["gpi-pd-small"]
    )  # main() rebinds it
    assert reproduce.main(["--preset", "gpi-pd-small", "--dry-run", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 9  # 3 methods × 3 seeds, one process per seed (GPI-PD)
    assert all("agent/gpi_pd.yaml" in line and "agent.gradient_updates=5" in line for line in lines)
    assert (
        reproduce.main(
            ["--preset", "gpi-pd-small", "--backbone", "capql", "--dry-run", "--out", str(tmp_path)]
        )
        == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines and not any("agent/gpi_pd.yaml" in line for line in lines)

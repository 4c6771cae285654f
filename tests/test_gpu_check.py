"""tools/gpu_check.sh's verdicts (tools/gpu_check_verdicts.py) read the step logs right: a pass, a fail and a
missing number each give their word, and the script itself parses (bash -n)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tool_modules import load_tool

ROOT = Path(__file__).resolve().parents[1]


V = load_tool("gpu_check_verdicts")

PASSING = {
    "graph_check": "S=1: 100 updates, params/state max |diff| 0, terms 0, captures 1\n"
    "S=8: 100 updates, params/state max |diff| 2.4e-07, terms 0, captures 1\n"
    "graph_captures: 1 1\ngraph_vs_eager_max_abs_diff: 2.4e-07\n",
    "bench_train_graph": "prism_capql: 700.0 env-steps/s (1.43 ms/step)\n"
    "morl_baselines_capql: 100.0 env-steps/s (10.00 ms/step)\n"
    "overhead_vs_bare_graph: 1.050x\noverhead_vs_bare_torch: 0.700x\nspeedup_vs_morl_baselines: 7.00x\n",
    "bench_population_s8": "population_env_steps_per_s: 3500.0\naggregate_speedup_vs_solo: 5.00x\n",
    "bench_population_s32": "population_env_steps_per_s: 10500.0\n",
    "bench_reward_fit": "speedup_vs_sequential: 3.20x\n",
    "bench_reward_fit_stacked": "stacked S=10 x K=3: wall 10.00s; sequential 10 fits: wall 60.00s\n"
    "stacked_speedup_vs_sequential: 6.00x\n",
    "cuda_tests": "7 passed in 30.00s\n",
    "gpu_check": "step quickstart_population rc=0 50s (limit 120s)\n",
    "quickstart_deterministic": "  seed0/eval.csv: identical\ndeterministic_files_identical: 8/8\n"
    "deterministic_run_wall_s: 48.5\n",
}


def _status(lines: list[str]) -> dict[str, str]:
    return {line.split()[1].rstrip(":"): line.split()[2] for line in lines if line.startswith("VERDICT")}


def test_all_goals_met_reads_pass_with_the_numbers():
    lines = V.verdicts(PASSING)
    assert [line.split()[1].rstrip(":") for line in lines if line.startswith("VERDICT")] == [
        g for g, _ in V.GOALS
    ]
    assert set(_status(lines).values()) == {"PASS"}
    assert any("3500.0 / 100.0 env-steps/s = 35.0x >= 30x" in line for line in lines)
    assert "INFO bench_train_graph overhead_vs_bare_graph: 1.05" in lines
    assert "INFO cuda_tests: 7 passed in 30.00s" in lines
    assert "INFO quickstart_population rc: 0" in lines
    assert "INFO quickstart_deterministic run_wall_s: 48.5" in lines


def test_a_goal_missed_fails_and_a_missing_number_is_missing():
    logs = dict(PASSING)
    logs["bench_population_s32"] = "population_env_steps_per_s: 6500.0\n"  # 65x < 100x
    logs["graph_check"] = logs["graph_check"].replace("2.4e-07", "3e-05")
    logs["bench_reward_fit_stacked"] = (
        "Traceback (most recent call last):\n  ...\nRuntimeError: CUDA out of memory\n"
    )
    del logs["bench_reward_fit"]
    logs["quickstart_deterministic"] = "deterministic_files_identical: 7/8\n"
    status = _status(V.verdicts(logs))
    assert status == {
        "graph_equals_eager": "FAIL",
        "single_run_vs_morl": "PASS",
        "population_s8_vs_morl": "PASS",
        "population_s32_vs_morl": "FAIL",
        "reward_fit_batched": "MISSING",
        "stacked_refit": "MISSING",
        "deterministic_repeats": "FAIL",
    }


def test_graph_verdict_needs_100_updates_and_one_capture_per_population():
    dry = dict(PASSING, graph_check="S=1: 5 updates, x\nS=2: 5 updates, x\ngraph_captures: 0 0\n"
               "graph_vs_eager_max_abs_diff: 0\n")  # fmt: skip
    assert _status(V.verdicts(dry))["graph_equals_eager"] == "FAIL"  # a CPU dry run: nothing captured
    stacked_small = dict(
        PASSING, bench_reward_fit_stacked="stacked S=2 x K=3: ...\nstacked_speedup_vs_sequential: 9.0x\n"
    )
    assert _status(V.verdicts(stacked_small))["stacked_refit"] == "FAIL"  # the goal is stated at S = 10


def test_gpu_check_script_parses():
    subprocess.run(["bash", "-n", str(ROOT / "tools" / "gpu_check.sh")], check=True)


def test_the_determinism_verdict_is_missing_without_its_line_and_a_pair_of_no_files_fails():
    crashed = dict(
        PASSING, quickstart_deterministic="deterministic run deterministic0: rc 1, 3.0 s, final HV []\n"
    )
    assert _status(V.verdicts(crashed))["deterministic_repeats"] == "MISSING"
    empty = dict(PASSING, quickstart_deterministic="deterministic_files_identical: 0/0\n")
    assert _status(V.verdicts(empty))["deterministic_repeats"] == "FAIL"


def test_source_metadata_registers_prisms_entry_points_as_pyproject_declares_them(tmp_path, monkeypatch):
    """tools/source_metadata.py: importlib.metadata reads the written dist-info as the prism-morl distribution
    with pyproject's entry points (the plug-ins and the console script); a child of a tree without metadata
    gets it first on PYTHONPATH, and one of an installed tree keeps its environment."""
    import importlib.metadata

    import tomllib

    source_metadata = load_tool("source_metadata")
    folder = source_metadata.write_metadata(tmp_path / "meta")
    dist = importlib.metadata.PathDistribution(folder / "prism_morl-0.0.0.dist-info")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert dist.metadata["Name"] == "prism-morl" == source_metadata.DISTRIBUTION
    plugins = {ep.name: ep.value for ep in dist.entry_points.select(group="prism.plugins")}
    assert plugins == project["entry-points"]["prism.plugins"] == {"prism": "prism.plugins:register"}
    scripts = {ep.name: ep.value for ep in dist.entry_points.select(group="console_scripts")}
    assert scripts == project["scripts"] and "prism" in scripts

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setattr(source_metadata, "installed", lambda: False)
    env = source_metadata.subprocess_env(tmp_path / "child")
    assert env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path / "child"), "/elsewhere"]
    assert (tmp_path / "child" / "prism_morl-0.0.0.dist-info" / "entry_points.txt").is_file()
    monkeypatch.setattr(source_metadata, "installed", lambda: True)
    assert source_metadata.subprocess_env(tmp_path / "unused")["PYTHONPATH"] == "/elsewhere"
    assert not (tmp_path / "unused").exists()

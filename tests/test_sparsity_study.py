"""The sparsity-study preset: the runs it reuses have exactly the config this grid would give them (labels apart,
and swimmer's unused N where the description says), each level's arm differs from its p_rel = 0 reference only
in the swept key, and the grid runs the cells the issue asks for."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest
from study_configs import planned_config
from test_ablation_study import _differences

from prism.config import load_config
from prism.experiments import cli
from prism.experiments.studies import load_preset

PRESET = load_preset("sparsity-study")


def _planned(env: str, arm: str, seed: int, tmp_path: Path):
    """The config this grid's command for (env, arm, seed) would run."""
    return planned_config(PRESET, env, arm, seed, tmp_path)


def test_every_reused_run_has_this_grids_config(tmp_path):
    checked = 0
    for join in PRESET.joined:
        for arm in join.arms:
            paths = sorted((join.folder() / join.env / join.source_arm(arm)).glob("seed*/config.yaml"))
            assert len(paths) == 5, (join.env, arm)
            planned = _planned(join.env, arm, 0, tmp_path)  # the seed is a label (LABELS), as run_dir is
            for path in paths:
                differences = _differences(planned, load_config([path], record=True))
                # control-cost-study ran swimmer's baseline with N = 1000, which it never collects
                allowed = {"loop.initial_episodes"} if (join.env, arm) == ("swimmer", "c-baseline") else set()
                assert set(differences) <= allowed, (path, differences)
                checked += 1
    assert checked == 65  # 13 (env, arm) pairs × 5 seeds


def test_each_level_differs_from_its_reference_only_in_the_swept_key(tmp_path):
    for sweep in PRESET.sweeps:
        key = sweep.key
        for series in sweep.series:
            for env in PRESET.envs:
                arms = [(lv, arm) for lv, arm in series.arms if arm in PRESET.methods_for(env)]
                if not arms:
                    continue
                reference = _planned(env, arms[0][1], 0, tmp_path)
                for level, arm in arms[1:]:
                    config = _planned(env, arm, 0, tmp_path)
                    assert set(_differences(config, reference)) == {key}, (env, arm)
                    section, name = key.split(".")
                    assert getattr(getattr(config, section), name) == level


def test_the_grid_runs_the_issues_cells_and_nothing_it_reuses():
    runs = Counter((c.env, PRESET.arm(c.method).method) for c in PRESET.cells() if c.source is None)
    assert sum(n for (_, method), n in runs.items() if method == "baseline") == 4 * 4 * 3 + 2 * 3
    assert sum(n for (_, method), n in runs.items() if method == "prism") == 2 * 4 * 3
    assert {env for env, method in runs if method == "prism"} == {"hopper", "walker"}
    reused = {(c.env, c.method) for c in PRESET.cells() if c.source is not None}
    assert ("halfcheetah", "b-ctrl") not in reused and ("hopper", "c-baseline") in reused


def _fake_run(run_dir: Path, hv: float, prism: bool, segments: int) -> None:
    run_dir.mkdir(parents=True)
    rows = ["env_steps,hv,eum,vo,final", f"25000,{hv / 2},1.0,1.0,0", f"50000,{hv},{hv / 1e5},1.0,1"]
    (run_dir / "eval.csv").write_text("\n".join(rows) + "\n")
    fits = [
        {"store": {"episodes": 1000, "segments": segments}, "validation": {"pearson": 0.5}},
        {"store": {"episodes": 1050, "segments": segments + 50}, "validation": {"pearson": 0.6}},
    ]
    (run_dir / "summary.json").write_text(json.dumps({"reward_fits": fits} if prism else {}))


def test_its_report_on_fake_runs_beside_the_committed_ones(tmp_path):
    """The report the lanes' runs will get: fake runs for every cell this grid runs, the committed runs for
    every reused one; the sweeps come first, with a comparison for every level of every env."""
    pytest.importorskip("rliable")
    out, results = tmp_path / "grid", tmp_path / "report"
    for cell in PRESET.cells():
        if cell.source is None:
            prism = PRESET.arm(cell.method).method == "prism"
            level = dict((arm, lv) for lv, arm in PRESET.sweeps[0].series[1].arms).get(cell.method, 0.0)
            segments = round(1000 * (1 + 100 * level))  # ~1 + p_rel × episode length segments an episode
            _fake_run(cell.run_dir(out), 1e6 * (1 + cell.seed / 10), prism, segments)
    argv = ["--preset", "sparsity-study", "--report-only", "--out", str(out), "--results", str(results)]
    assert cli.main(argv) == 0
    markdown = (results / "table.md").read_text()
    assert markdown.index("against env.p_rel") < markdown.index("against env.sparse_channel")
    assert markdown.index("against env.sparse_channel") < markdown.index("Final = the evaluation")
    ratios = [r for r in csv.DictReader((results / "sweep.csv").open()) if r["statistic"] == "ratio"]
    drops = {(r["env"], r["level"]) for r in ratios if r["series"] == "sparse baseline"}
    assert len(drops) == 4 * 5 and all(
        r["family"] == "primary" for r in ratios if r["series"] == "sparse baseline"
    )
    robust = {(r["env"], r["level"]) for r in ratios if r["series"] == "PRISM"}
    assert robust == {
        (e, lv) for e in ("mo-hopper-v5", "mo-walker2d-v5") for lv in ("0.01", "0.05", "0.2", "0.5")
    }
    channels = [
        r for r in csv.DictReader((results / "sweep_channel.csv").open()) if r["statistic"] == "ratio"
    ]
    other_channels = {("mo-halfcheetah-v5", "-1"), ("mo-hopper-v5", "-1"), ("mo-hopper-v5", "1")}
    other_channels |= {("mo-swimmer-v5", "-1"), ("mo-walker2d-v5", "-1")}
    first_channel = {
        (env, "0") for env in ("mo-hopper-v5", "mo-walker2d-v5", "mo-halfcheetah-v5", "mo-swimmer-v5")
    }
    assert sorted((r["env"], r["level"]) for r in channels) == sorted(other_channels | first_channel)
    store = {
        (r["env"], r["level"], r["cycle"]): float(r["value"])
        for r in csv.DictReader((results / "sweep.csv").open())
        if r["statistic"] == "segments_per_episode"
    }
    # the committed walker2d e-prism runs recorded their store (one segment an episode at p_rel = 0); the
    # protocol study's hopper runs predate the records
    assert store[("mo-walker2d-v5", "0", "1")] == 1.0 and ("mo-hopper-v5", "0", "1") not in store
    assert store[("mo-hopper-v5", "0.2", "1")] == 21.0


def test_only_arms_on_the_papers_task_get_the_papers_numbers():
    # the paper's tables have the forward channel sparse and released at the episode's end: an arm released
    # along the episode, or with another channel sparse, has no counterpart there (the oracle always has)
    from prism.experiments.collect import paper_values
    from prism.experiments.tables import arm_table

    lines, rows = arm_table(PRESET, {}, paper_values())
    paper = {(r["env"], r["method"], r["metric"]): r["paper_mean"] for r in rows}
    hopper = "mo-hopper-v5"
    assert paper[hopper, "e-baseline", "hv"] == pytest.approx(8.40e6)
    assert paper[hopper, "e-oracle", "hv"] == pytest.approx(1.30e7)
    for arm in ("b-p001", "b-p020", "p-p050", "c-baseline", "b-ch1"):
        assert paper[hopper, arm, "hv"] != paper[hopper, arm, "hv"], arm  # NaN: "—" in the table
    # the control-cost study reads the paper's control-cost table: its control-sparse arms are on its task
    control = load_preset("control-cost-study")
    assert control.paper_counterpart("hopper", "c-baseline")
    assert control.paper_counterpart("hopper", "c-prism")
    assert not PRESET.paper_counterpart("hopper", "c-baseline")

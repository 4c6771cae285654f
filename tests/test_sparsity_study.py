"""The sparsity-study preset: the runs it reuses have exactly the config this grid would give them (labels apart,
and swimmer's unused N where the description says), each level's arm differs from its p_rel = 0 reference only
in the swept key, and the grid runs the cells the issue asks for."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from test_ablation_study import _differences

from prism.config import load_config
from prism.experiments.runner import Job, fit_command
from prism.experiments.studies import load_preset

PRESET = load_preset("sparsity-study")


def _planned(env: str, arm: str, seed: int, tmp_path: Path):
    command = fit_command(Job(env, arm, (seed,), False), PRESET, tmp_path)
    at = command.index("--config") + 1
    files = [c for c in command[at:] if c.endswith(".yaml")]
    keys = [c for c in command[at:] if "=" in c and not c.startswith(("run_dir=", "method_label="))]
    return load_config(files, keys)


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

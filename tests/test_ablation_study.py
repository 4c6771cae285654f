"""The ablation-study preset (issue 62): a reused run has exactly the config this grid would give it (labels
apart), and the references read from table1-study differ from this grid's only where the report says."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from study_configs import planned_config

from prism.config import load_config
from prism.experiments.studies import load_preset

ROOT = Path(__file__).resolve().parents[1]
PRESET = load_preset("ablation-study")
LABELS = ("run_dir", "method_label", "seed")


def _planned(env: str, arm: str, seed: int, tmp_path: Path):
    """The config this grid's command for (env, arm, seed) would run."""
    return planned_config(PRESET, env, arm, seed, tmp_path)


# Values that differ in the file but not in what a CPU run does: ``agent.cuda_graph: auto`` captures a graph only
# on CUDA, so on the CPU these runs resolved to (config.yaml's resolved block: device cpu) it is ``false``.
SAME_ON_CPU = {"agent.cuda_graph": {"auto", False}}


def _differences(a, b, prefix: str = "") -> dict[str, tuple]:
    out = {}
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        key = f"{prefix}{field.name}"
        if dataclasses.is_dataclass(x) and dataclasses.is_dataclass(y) and type(x) is type(y):
            out.update(_differences(x, y, f"{key}."))
        elif x != y and key not in LABELS and not {x, y} <= SAME_ON_CPU.get(key, set()):
            out[key] = (x, y)
    return out


def _committed(join, arm: str, env: str):
    folder = join.folder() / env / join.source_arm(arm)
    return sorted(folder.glob("seed*/config.yaml"))


def test_every_reused_run_has_this_grids_config_apart_from_labels(tmp_path):
    checked = 0
    for join in PRESET.joined:
        for arm, _ in join.renamed:
            for path in _committed(join, arm, join.env):
                seed = int(path.parent.name.removeprefix("seed"))
                committed = load_config([path], record=True)
                assert "device: cpu" in path.read_text().split("resolved:")[1]
                assert _differences(_planned(join.env, arm, seed, tmp_path), committed) == {}, path
                checked += 1
    assert checked >= 5  # walker2d's a-uniform: table1-study's five e-uniform seeds


@pytest.mark.parametrize("env", ["swimmer", "walker"])
def test_the_references_differ_only_where_the_description_says(env, tmp_path):
    for arm in ("e-oracle", "e-baseline"):
        join = PRESET.joined_source(env, arm)
        for path in _committed(join, arm, env):
            seed = int(path.parent.name.removeprefix("seed"))
            differences = _differences(_planned(env, arm, seed, tmp_path), load_config([path], record=True))
            # table1-study ran swimmer with N = 250 random episodes, which a method without a reward model
            # never collects.
            allowed = {"loop.initial_episodes"} if env == "swimmer" else set()
            assert set(differences) <= allowed, (path, differences)
    if env == "swimmer":
        assert "N = 250" in PRESET.description


def test_a_reused_arm_is_read_from_its_own_folder():
    cells = {(c.env, c.method, c.seed): c for c in PRESET.cells()}
    cell = cells[("walker", "a-uniform", 3)]
    assert cell.run_dir(Path("/nowhere")) == ROOT / "docs/results/table1-study/runs/walker/e-uniform/seed3"
    own = cells[("walker", "a-random", 3)]
    assert own.source is None and own.run_dir(Path("/out")) == Path("/out/walker/a-random/seed3")


def test_control_cost_studys_oracles_differ_only_in_the_hidden_channel(tmp_path):
    """The oracle sees every channel dense: the Table 1 studies' oracle runs serve as control-cost-study's, their
    configs equal to the grid's apart from env.sparse_channel (and swimmer's unused N, as the description says)."""
    preset = load_preset("control-cost-study")
    checked = 0
    for env in preset.envs:
        join = preset.joined_source(env, "e-oracle")
        for path in sorted((join.folder() / env / "e-oracle").glob("seed*/config.yaml")):
            seed = int(path.parent.name.removeprefix("seed"))
            planned = planned_config(preset, env, "e-oracle", seed, tmp_path)
            differences = _differences(planned, load_config([path], record=True))
            allowed = {"env.sparse_channel"} | ({"loop.initial_episodes"} if env == "swimmer" else set())
            assert "env.sparse_channel" in differences and set(differences) <= allowed, (path, differences)
            checked += 1
    assert checked == 15
    assert "env.sparse_channel" in preset.description and "N = 250" in preset.description

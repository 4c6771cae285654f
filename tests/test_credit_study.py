"""The credit-study preset: each new arm runs exactly its comparators' committed configs with return
conservation on (labels apart), the comparators are read from their own studies' runs, and the primary family
is the three rows declared before the runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from study_configs import planned_config
from test_ablation_study import _differences

from prism.config import load_config
from prism.experiments.studies import load_preset

ROOT = Path(__file__).resolve().parents[1]
PRESET = load_preset("credit-study")

COMPARED_WITH = {
    ("walker", "c-conserve"): ("c-prism", "c-uniform"),
    ("walker", "n-conserve"): ("a-prism", "e-uniform"),
    ("swimmer", "n-conserve"): ("e-prism-fast",),
}
"""Each new arm of an env and the committed arms it is compared with."""

COMMITTED = {
    "c-prism": "docs/results/control-cost-study/runs/walker/c-prism",
    "c-uniform": "docs/results/control-cost-study/runs/walker/c-uniform",
    "a-prism": "docs/results/ablation-study/runs/walker/a-prism",
    "e-uniform": "docs/results/table1-study/runs/walker/e-uniform",
    "e-prism-fast": "docs/results/table1-study/runs/swimmer/e-prism-fast",
}


def _planned(env: str, arm: str, seed: int, tmp_path: Path):
    """The config this grid's command for (env, arm, seed) would run."""
    return planned_config(PRESET, env, arm, seed, tmp_path)


def _committed_configs(arm: str) -> list[tuple[int, Path]]:
    paths = sorted((ROOT / COMMITTED[arm]).glob("seed*/config.yaml"))
    assert len(paths) == 5, arm
    return [(int(p.parent.name.removeprefix("seed")), p) for p in paths]


def test_the_comparators_are_read_from_their_studies_committed_runs():
    cells = {(c.env, c.method, c.seed): c for c in PRESET.cells()}
    for (env, _), arms in COMPARED_WITH.items():
        for arm in arms:
            for seed in range(5):
                assert (
                    cells[(env, arm, seed)].run_dir(Path("/nowhere")) == ROOT / COMMITTED[arm] / f"seed{seed}"
                )
    own = [c for c in PRESET.cells() if c.source is None]
    assert sorted({(c.env, c.method) for c in own}) == sorted(COMPARED_WITH)
    assert len(own) == 15


@pytest.mark.parametrize("arm", sorted(COMMITTED))
def test_each_comparator_ran_the_config_this_grid_gives_it(arm, tmp_path):
    env = "swimmer" if arm == "e-prism-fast" else "walker"
    for seed, path in _committed_configs(arm):
        committed = load_config([path], record=True)
        assert "device: cpu" in path.read_text().split("resolved:")[1]
        assert _differences(_planned(env, arm, seed, tmp_path), committed) == {}, path


@pytest.mark.parametrize(("env", "arm"), sorted(COMPARED_WITH))
def test_a_new_arm_differs_from_its_comparators_only_in_conservation(env, arm, tmp_path):
    for reference in COMPARED_WITH[(env, arm)]:
        for seed, path in _committed_configs(reference):
            planned = _planned(env, arm, seed, tmp_path)
            committed = load_config([path], record=True)
            if reference.endswith("uniform"):
                # uniform R/T fits no model: the method and the reward block differ, every other key is shared
                assert planned.method == "prism" and committed.method == "uniform"
                assert planned.reward.conserve_return and not hasattr(committed.reward, "conserve_return")
                planned.method, planned.reward = committed.method, committed.reward
                # prism's overlay leaves λ to the env spec (spec_defaults, not a key), uniform's files name it: the
                # λ itself is compared below
                planned.spec_defaults = committed.spec_defaults
            differences = _differences(planned, committed)
            expected = {} if reference.endswith("uniform") else {"reward.conserve_return": (True, False)}
            assert differences == expected, (path, differences)


def test_the_primary_family_is_the_three_declared_rows():
    primary = [(r.numerator, r.denominator) for r in PRESET.ratio_rows() if r.primary]
    assert primary == [
        ("c-conserve", "c-uniform"),
        ("n-conserve", "e-uniform"),
        ("n-conserve", "e-prism-fast"),
    ]
    # each primary ratio's two arms share exactly one env, so the family is 3 HV rows
    for a, b in primary:
        envs = [e for e in PRESET.envs if {a, b} <= set(PRESET.methods_for(e))]
        assert len(envs) == 1, (a, b, envs)
    assert PRESET.equivalence_margin == 0.05

"""Seed streams (prism.core.seeding): collection, diagnostics and evaluation never touch the training RNGs, and
evaluation start states follow the run seed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from toy_runs import toy_run

from prism.config import load_config
from prism.core.seeding import derive_seed, population_seed
from prism.loop import EvalEnvPool, evaluate_agent, pair_seeds
from prism.run.fit import build_run, fit_run

CONF = Path(__file__).resolve().parents[1] / "conf"
TOY = toy_run()


def test_derive_seed_is_stable_across_processes_and_separates_streams():
    code = "from prism.core.seeding import derive_seed; print(derive_seed(3, 'collect/reset', 2))"
    outputs = set()
    for hash_seed in ("1", "2"):  # Python's str hash() differs between these two interpreters
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        outputs.add(int(result.stdout))
    assert outputs == {derive_seed(3, "collect/reset", 2)}
    seeds = {
        derive_seed(run_seed, stream, index)
        for run_seed in (0, 1, 1000)
        for stream in ("eval", "collect/reset", "collect/actions", "diagnostics/episode")
        for index in (0, 1, 2)
    }
    assert len(seeds) == 3 * 4 * 3  # every (seed, stream, index) gets its own seed
    assert all(0 <= s < 2**32 for s in seeds)
    with pytest.raises(ValueError, match="derive_seed"):
        derive_seed(-1, "eval")


def test_population_seed_depends_on_every_member_and_their_order():
    """A population's shared draws (the update's policy noise) follow its whole composition: a single run is
    the population of one, and changing any member's seed, adding one or reordering them changes the seed."""
    assert population_seed([7], "update") == derive_seed(7, "update")
    populations = [[0, 1], [0, 2], [1, 0], [0, 1, 2], [5, 1], [0], [1]]
    seeds = {tuple(p): population_seed(p, "update") for p in populations}
    assert len(set(seeds.values())) == len(populations), seeds
    assert population_seed([0, 1], "update") != population_seed([0, 1], "other")
    assert all(0 <= s < 2**32 for s in seeds.values())


def test_expert_collection_leaves_the_training_generator_alone(tmp_path):
    config = load_config([CONF / "quickstart.yaml"], [*TOY, f"run_dir={tmp_path / 'r'}"])
    run = build_run(config, progress_bar=False)
    agent, loop = run.agent, run.loop
    agent._ensure_generators()  # the training streams: preferences, replay indices, update noise

    def states():
        gens = [*agent._pref_generators, *agent._replay_generators, agent._update_generator]
        return [g.get_state().clone() for g in gens]

    before = states()
    loop._collect(agent, None, random_policy=False)  # E expert episodes with the current policy
    assert loop.state.episodes_collected == [config.loop.expert_episodes]
    assert all(torch.equal(a, b) for a, b in zip(states(), before))
    # the check has teeth: drawing a training preference does advance the preference generator
    agent.sample_preferences(1, agent._pref_generators[0])
    assert not torch.equal(states()[0], before[0])


def test_figures_do_not_change_the_run(tmp_path):
    """The shaped-vs-true figure rolls out an episode with the expert policy; drawing it or not (figures)
    must give a byte-identical eval.csv."""
    with_figures = tmp_path / "figures"
    without = tmp_path / "no_figures"
    run = fit_run([str(CONF / "quickstart.yaml")], [*TOY, f"run_dir={with_figures}", "figures=true"])
    assert run.loop.state.fits == 2  # two fits, so the second figure used the trained expert policy
    fit_run([str(CONF / "quickstart.yaml")], [*TOY, f"run_dir={without}", "figures=false"])
    assert (with_figures / "eval.csv").read_bytes() == (without / "eval.csv").read_bytes()

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def images(run_dir: Path) -> set[str]:
        tags: set[str] = set()
        for events in run_dir.rglob("events.out.tfevents*"):
            accumulator = EventAccumulator(str(events), size_guidance={"images": 0})
            accumulator.Reload()
            tags |= set(accumulator.Tags()["images"])
        return tags

    assert {"reward/shaped_vs_true", "eval/front", "eval_final/front"} <= images(with_figures)
    assert images(without) == set()


def _reset_seeds(run, monkeypatch) -> list[int]:
    seen: list[int] = []
    original = EvalEnvPool.reset

    def recording_reset(pool, seeds):
        seen.extend(seeds)
        return original(pool, seeds)

    monkeypatch.setattr(EvalEnvPool, "reset", recording_reset)
    evaluate_agent(run.agent, run.spec, run.evaluation.config)
    monkeypatch.undo()
    return seen


def test_evaluation_reset_seeds_follow_the_run_seed(tmp_path, monkeypatch):
    def reset_seeds(*overrides: str) -> list[int]:
        config = load_config([CONF / "quickstart.yaml"], [*TOY, f"run_dir={tmp_path / 'r'}", *overrides])
        return _reset_seeds(build_run(config, progress_bar=False), monkeypatch)

    seed0, seed1 = reset_seeds("seed=0"), reset_seeds("seed=1")
    assert len(seed0) == 3 and seed0 != seed1
    assert seed0 == pair_seeds(derive_seed(0, "eval"), 3)
    # an explicit eval.seed fixes the start states for every run seed
    fixed0, fixed1 = reset_seeds("seed=0", "eval.seed=12345"), reset_seeds("seed=1", "eval.seed=12345")
    assert fixed0 == fixed1 == pair_seeds(12345, 3)
    assert np.unique(seed0 + seed1).size == 6

"""The Python API (issue 29, item 2): ``prism.load_run`` gives the resolved config, ``act``, ``evaluate`` (the
numbers of ``prism evaluate``) and the reward model's ``shaped_reward``."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from toy_runs import toy_run

import prism
from prism.cli import main
from prism.config import ConfigError
from prism.evaluation.rollout import pair_seeds
from prism.reward.shapers import PredictedRewardShaper, Transition

CONF = Path(__file__).resolve().parents[1] / "conf"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A finished toy PRISM run (two cycles, a reward model), final protocol 4 weights x 2 episodes."""
    run_dir = tmp_path_factory.mktemp("api") / "run"
    overrides = toy_run({"eval.final.num_weights": 4, "eval.final.episodes": 2, "figures": "false"})
    assert main(["fit", "--config", str(CONF / "quickstart.yaml"), *overrides, f"run_dir={run_dir}"]) == 0
    return run_dir


def _last_row(path: Path) -> dict[str, str]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))[-1]


def test_load_run_gives_the_resolved_config_and_the_checkpoint_step(run_dir):
    run = prism.load_run(run_dir)
    assert run.config.env.id == "prism/Toy-v0" and run.config.loop.cycles == 2
    assert run.env_steps == 400 and run.seeds == [0]
    assert "prism/Toy-v0" in repr(run)


@pytest.mark.parametrize(
    ("cli_args", "api_kwargs"),
    [
        ([], {}),
        (["eval.final.num_weights=3", "eval.final.episodes=1"], {"num_weights": 3, "episodes": 1}),
        (["--protocol", "periodic"], {"protocol": "periodic"}),
    ],
)
def test_evaluate_gives_the_numbers_of_prism_evaluate(run_dir, cli_args, api_kwargs):
    run = prism.load_run(run_dir)
    result = run.evaluate(**api_kwargs)
    assert main(["evaluate", str(run_dir), *cli_args]) == 0
    row = _last_row(run_dir / "evaluate.csv")
    assert (int(row["num_weights"]), int(row["episodes"])) == (len(result.weights), result.returns.shape[1])
    for key in ("hv", "eum", "vo"):
        assert float(row[key]) == pytest.approx(getattr(result, key), rel=1e-12, abs=1e-12), key
    for i, name in enumerate(run.spec.objective_names):
        assert float(row[f"return_{name}"]) == pytest.approx(float(result.mean[:, i].mean()), rel=1e-12)


def test_evaluate_by_default_reproduces_the_runs_final_evaluation(run_dir):
    with (run_dir / "eval.csv").open(newline="") as fh:
        final = [r for r in csv.DictReader(fh) if r["final"] == "1"][-1]
    result = prism.load_run(run_dir).evaluate()
    assert len(result.weights) == 4 and result.returns.shape[1] == 2
    for key in ("hv", "eum", "vo"):
        assert float(final[key]) == pytest.approx(getattr(result, key), rel=1e-9), key


def test_act_is_the_policy_the_evaluation_rolls_out(run_dir):
    """An episode stepped by hand with ``run.act`` has the discounted return the evaluation reports for the
    same weight and reset seed (an independent, unbatched rollout)."""
    run = prism.load_run(run_dir)
    cfg = run.eval_config(num_weights=3, episodes=1)
    result = run.evaluate(num_weights=3, episodes=1)
    env = run.spec.make()
    for index, (weight, seed) in enumerate(zip(result.weights, pair_seeds(cfg.reset_seed(), 3))):
        obs, _ = env.reset(seed=seed)
        total, discount, done = np.zeros(run.spec.n_objectives), 1.0, False
        while not done:
            action = run.act(obs, weight)
            assert action.shape == (run.spec.act_dim,) and np.all(np.abs(action) <= 1)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += discount * np.asarray(reward)
            discount *= cfg.gamma
            done = terminated or truncated
        np.testing.assert_allclose(total, result.mean[index], rtol=1e-4, atol=1e-5)


def test_act_batches_broadcasts_weights_and_samples_when_asked(run_dir):
    run = prism.load_run(run_dir)
    env = run.spec.make()
    obs = np.stack([env.reset(seed=s)[0] for s in range(5)])
    weight = np.full(run.spec.n_objectives, 1 / run.spec.n_objectives)
    batch = run.act(obs, weight)
    assert batch.shape == (5, run.spec.act_dim)
    np.testing.assert_allclose(batch, np.stack([run.act(o, weight) for o in obs]), atol=1e-6)
    sampled = run.act(obs, weight, deterministic=False)
    assert sampled.shape == batch.shape and not np.allclose(sampled, batch)
    with pytest.raises(ValueError, match="weights"):
        run.act(obs, [1.0, 0.0, 0.0, 0.0])


def test_shaped_reward_is_the_shapers_per_step_prediction(run_dir):
    """The batched ``shaped_reward`` equals what the training shaper computes step by step."""
    run = prism.load_run(run_dir)
    assert run.reward_model is not None and run.sparse_channel == run.spec.sparse_channel
    env = run.spec.make()
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=3)
    transitions = []
    for _ in range(30):
        action = rng.uniform(-1, 1, run.spec.act_dim).astype(np.float32)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        transitions.append(Transition(obs, action, np.asarray(reward), next_obs, terminated, np.ones(2) / 2))
        obs = next_obs if not (terminated or truncated) else env.reset()[0]
    shaper = PredictedRewardShaper(run.reward_model, run.sparse_channel)
    expected = np.array([shaper.predict_step(t.obs, t.action, t.reward) for t in transitions])
    values = run.shaped_reward(transitions)
    assert values.shape == (30,)
    np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-6)
    assert np.std(values) > 0  # the model tells steps apart
    arrays = {k: np.stack([getattr(t, k) for t in transitions]) for k in ("obs", "action", "reward")}
    np.testing.assert_allclose(run.shaped_reward(arrays), values, rtol=1e-6)
    assert run.shaped_reward(transitions[4]).shape == ()


def test_load_run_of_a_folder_that_is_not_a_run_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="has no config.yaml"):
        prism.load_run(tmp_path)


def test_load_run_of_a_population_folder_asks_which_member_and_lists_them(tmp_path):
    """A population folder used to load as member 0 without a word; now the member is named or the call is
    refused, listing the members (the refusal comes before anything is built)."""
    from prism.config import load_config, to_yaml

    pop = tmp_path / "pop"
    pop.mkdir()
    overrides = [*toy_run({"seeds": "[3,5]", "seed": None}), f"run_dir={pop}"]
    (pop / "config.yaml").write_text(to_yaml(load_config([CONF / "quickstart.yaml"], overrides)))
    with pytest.raises(ConfigError) as refused:
        prism.load_run(pop)
    line = str(refused.value)
    assert line.startswith(
        f"run_dir: {pop} is a population of 2 members; choose one with load_run(..., member=N)"
    )
    assert f"member=0 (seed 3, {pop / 'seed3'}), member=1 (seed 5, {pop / 'seed5'})" in line
    assert "\n" not in line
    with pytest.raises(
        ConfigError, match=r"^member: 2 is not a member of .*; its members: member=0 \(seed 3"
    ):
        prism.load_run(pop, member=2)


@pytest.fixture(scope="module")
def population_dir(tmp_path_factory) -> Path:
    """A finished toy PRISM population of seeds 0 and 1, final protocol 3 weights x 2 episodes."""
    run_dir = tmp_path_factory.mktemp("api") / "pop"
    overrides = toy_run(
        {
            "seeds": "[0,1]",
            "seed": None,
            "eval.final.num_weights": 3,
            "eval.final.episodes": 2,
            "figures": "false",
        }
    )
    assert main(["fit", "--config", str(CONF / "quickstart.yaml"), *overrides, f"run_dir={run_dir}"]) == 0
    return run_dir


def test_a_population_members_evaluation_is_its_member_folders_and_not_member_0s(population_dir):
    """``load_run(pop, member=0).evaluate(member=1)`` is ``load_run(pop/seed1).evaluate()`` (the same episodes, the same
    numbers), is member 1's own final evaluation from training (its eval.csv), and is not member 0's."""
    pop = prism.load_run(population_dir, member=0)
    assert pop.seeds == [0, 1]
    member_1 = pop.evaluate(member=1)
    folder = prism.load_run(population_dir / "seed1")
    assert folder.member == 1
    alone = folder.evaluate()
    np.testing.assert_array_equal(member_1.returns, alone.returns)
    np.testing.assert_array_equal(member_1.lengths, alone.lengths)
    assert (member_1.hv, member_1.eum, member_1.vo) == (alone.hv, alone.eum, alone.vo)
    with (population_dir / "seed1" / "eval.csv").open(newline="") as fh:
        final = [r for r in csv.DictReader(fh) if r["final"] == "1"][-1]
    for key in ("hv", "eum", "vo"):
        assert float(final[key]) == pytest.approx(getattr(member_1, key), rel=1e-9), key
    for bad in (2, -1):  # members 0 and 1 only: one past the last is refused, not read past the list
        with pytest.raises(ValueError, match=f"^member: {bad} is out of range for a run of 2 member"):
            pop.evaluate(member=bad)
    # a sampled action of one member: that member's, in its shape, drawn around its own deterministic action
    obs, weight = (
        np.full(pop.spec.obs_dim, 0.1, dtype=np.float32),
        [1.0 / pop.spec.n_objectives] * pop.spec.n_objectives,
    )
    torch.manual_seed(0)
    sampled = np.stack([pop.act(obs, weight, deterministic=False, member=1) for _ in range(64)])
    assert sampled.shape == (64, pop.spec.act_dim) and np.abs(sampled).max() <= 1.0
    mean_1, mean_0 = pop.act(obs, weight, member=1), pop.act(obs, weight, member=0)
    assert np.abs(sampled.mean(0) - mean_1).max() < np.abs(sampled.mean(0) - mean_0).max() + 0.25
    member_0 = pop.evaluate(member=0)
    assert not np.array_equal(member_0.returns, member_1.returns)
    np.testing.assert_array_equal(
        member_0.returns, prism.load_run(population_dir / "seed0").evaluate().returns
    )


def test_a_sampled_action_is_drawn_from_its_own_members_policy(population_dir):
    """``act(..., deterministic=False, member=m)`` keeps member m's draw of the population's joint sample: with
    the same torch seed, members 0 and 1 draw different actions (the same action would be one member's twice)."""
    pop = prism.load_run(population_dir, member=0)
    obs = np.full((4, pop.spec.obs_dim), 0.1, dtype=np.float32)
    weight = [1.0 / pop.spec.n_objectives] * pop.spec.n_objectives
    draws = {}
    for member in (0, 1):
        torch.manual_seed(7)
        draws[member] = pop.act(obs, weight, deterministic=False, member=member)
    assert draws[0].shape == draws[1].shape == (4, pop.spec.act_dim)
    assert not np.allclose(draws[0], draws[1])
    folder = prism.load_run(population_dir / "seed1")  # (loading builds networks: it draws from torch's RNG)
    torch.manual_seed(7)  # and the draw is the member's whatever folder it is loaded from
    np.testing.assert_array_equal(folder.act(obs, weight, deterministic=False), draws[1])


def test_a_population_members_reward_model_is_its_own(population_dir):
    """``load_run(pop, member=1).reward_model`` is member 1's fitted model (the one its ``seed1/`` folder
    loads), not member 0's, and ``shaped_reward(member=m)`` scores with member m's model."""
    pop_0, pop_1 = prism.load_run(population_dir, member=0), prism.load_run(population_dir, member=1)
    assert (pop_0.member, pop_1.member) == (0, 1)
    folder_1 = prism.load_run(population_dir / "seed1")

    def weights(run):
        return {k: v.clone() for k, v in run.reward_model.state_dict().items()}

    own, alone, other = weights(pop_1), weights(folder_1), weights(pop_0)
    assert own.keys() == alone.keys() == other.keys()
    assert all(torch.equal(own[k], alone[k]) for k in own)
    assert not all(torch.equal(own[k], other[k]) for k in own)
    rng = np.random.default_rng(1)
    arrays = {
        "obs": rng.normal(size=(16, pop_0.spec.obs_dim)).astype(np.float32),
        "action": rng.uniform(-1, 1, size=(16, pop_0.spec.act_dim)).astype(np.float32),
        "reward": rng.normal(size=(16, pop_0.spec.n_objectives)).astype(np.float32),
    }
    np.testing.assert_allclose(
        pop_0.shaped_reward(arrays, member=1), folder_1.shaped_reward(arrays), rtol=1e-6
    )
    assert not np.allclose(pop_0.shaped_reward(arrays, member=1), pop_0.shaped_reward(arrays, member=0))

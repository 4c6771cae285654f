"""Env layer: specs, symmetry operators, the sparse-reward wrapper on real MuJoCo and on the toy env."""

from __future__ import annotations

import numpy as np
import pytest

from prism.envs import (
    TOY_SPEC,
    EnvSpec,
    SparseRewardWrapper,
    SpecError,
    get_env_spec,
    make_env,
    release_probabilities,
)

MUJOCO_IDS = ["mo-hopper-v5", "mo-walker2d-v5", "mo-halfcheetah-v5", "mo-swimmer-v5"]


def _rollout(env, seed: int, action_seed: int, max_steps: int = 1000):
    """Run one episode with seeded uniform random actions; return per-step arrays."""
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(action_seed)
    emitted, true, released, obs_list = [], [], [], [obs]
    terminated = truncated = False
    for _ in range(max_steps):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        emitted.append(np.asarray(reward, dtype=np.float64))
        true.append(info.get("true_reward", reward))
        released.append(info.get("released"))
        obs_list.append(obs)
        if terminated or truncated:
            break
    return (
        np.array(emitted),
        np.array(true, dtype=np.float64),
        released,
        np.array(obs_list),
        terminated,
        truncated,
    )


@pytest.mark.parametrize("env_id", MUJOCO_IDS)
def test_spec_matches_env_and_partitions_observation(env_id):
    spec = get_env_spec(env_id)
    env = spec.make()
    assert env.observation_space.shape == (spec.obs_dim,)
    assert env.action_space.shape == (spec.act_dim,)
    assert env.unwrapped.reward_space.shape == (spec.n_objectives,)
    assert sorted(spec.symmetric_obs + spec.asymmetric_obs) == list(range(spec.obs_dim))
    # every action dim is reflected (docs/method.md §2)
    assert sorted(spec.symmetric_act) == list(range(spec.act_dim))
    assert spec.ref_point == (-100.0,) * spec.n_objectives


@pytest.mark.parametrize("env_id", [*MUJOCO_IDS, TOY_SPEC.id])
def test_reflections_are_involutions(env_id):
    spec = get_env_spec(env_id)
    L = np.diag(spec.obs_reflection())
    K = np.diag(spec.act_reflection())
    np.testing.assert_array_equal(L @ L, np.eye(spec.obs_dim))
    np.testing.assert_array_equal(K @ K, np.eye(spec.act_dim))
    assert not np.array_equal(L, np.eye(spec.obs_dim))  # a non-trivial reflection
    assert set(np.flatnonzero(spec.obs_reflection() < 0)) == set(spec.symmetric_obs)


def test_paper_lambdas():
    assert {i: get_env_spec(i).symreg_lambda for i in MUJOCO_IDS} == {
        "mo-hopper-v5": 0.01,
        "mo-walker2d-v5": 1.0,
        "mo-halfcheetah-v5": 0.01,
        "mo-swimmer-v5": 0.005,
    }


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"symmetric_obs": (2, 3, 4, 8, 9, 11)}, "env.symmetric_obs"),  # 11 out of range
        ({"symmetric_obs": (1, 2, 3, 4, 8, 9, 10)}, "env.symmetric_obs"),  # 1 also asymmetric
        ({"asymmetric_obs": (0, 1, 5, 6)}, "env.symmetric_obs/asymmetric_obs"),  # 7 in neither
        ({"symmetric_act": (0, 3)}, "env.symmetric_act"),
        ({"sparse_channel": 3}, "env.sparse_channel"),
        ({"ref_point": (-100.0, -100.0)}, "env.ref_point"),
        ({"symreg_lambda": -1.0}, "env.symreg_lambda"),
    ],
)
def test_spec_validation_names_the_field(change, key):
    with pytest.raises(SpecError, match=key.replace("/", ".")):
        get_env_spec("mo-hopper-v5").replace(**change)


def test_spec_obs_size_must_match_env():
    bad = get_env_spec("mo-swimmer-v5").replace(obs_dim=9, asymmetric_obs=(0, 3, 5, 8))
    with pytest.raises(SpecError, match="env.obs_dim"):
        bad.make()


def test_user_spec_from_dict_and_unknown_field():
    data = {
        "id": "mo-swimmer-v5",
        "objective_names": ["forward", "energy"],
        "obs_dim": 8,
        "act_dim": 2,
        "sparse_channel": 1,
        "symmetric_obs": [1, 2, 4, 6, 7],
        "asymmetric_obs": [0, 3, 5],
        "symmetric_act": [0, 1],
        "ref_point": [-50, -50],
        "symreg_lambda": 0.1,
    }
    spec = EnvSpec.from_dict(data)
    assert spec.sparse_channel == 1 and spec.symmetric_obs == (1, 2, 4, 6, 7)
    with pytest.raises(SpecError, match="env.colour"):
        EnvSpec.from_dict({**data, "colour": "red"})
    with pytest.raises(SpecError, match="env.obs_dim"):
        EnvSpec.from_dict({k: v for k, v in data.items() if k != "obs_dim"})
    with pytest.raises(SpecError, match="env.id: unknown env"):
        get_env_spec("mo-ant-v9")


def _check_episode_end_release(spec, seed, expect_terminated):
    env = make_env(spec, sparse_channel=0, p_rel=0.0, seed=seed)
    emitted, true, released, _, terminated, truncated = _rollout(env, seed=seed, action_seed=seed)
    assert terminated == expect_terminated and truncated == (not expect_terminated)
    # Hidden channel: zero on every step but the last, where it carries the whole episode's sum.
    np.testing.assert_array_equal(emitted[:-1, 0], 0.0)
    assert emitted[-1, 0] == pytest.approx(true[:, 0].sum(), rel=1e-5, abs=1e-4)
    assert not any(r[0] for r in released[:-1]) and released[-1][0]
    # Dense channels pass through untouched and are released every step.
    np.testing.assert_allclose(emitted[:, 1:], true[:, 1:], rtol=0, atol=0)
    assert all(r[1:].all() for r in released)
    return len(emitted)


def test_wrapper_terminating_episode_hopper():
    length = _check_episode_end_release(get_env_spec("mo-hopper-v5"), seed=3, expect_terminated=True)
    assert length < 1000


def test_wrapper_truncated_episode_swimmer():
    length = _check_episode_end_release(get_env_spec("mo-swimmer-v5"), seed=4, expect_terminated=False)
    assert length == 1000


@pytest.mark.parametrize("env_id", ["mo-hopper-v5", "mo-swimmer-v5"])
def test_release_prob_one_reproduces_the_unwrapped_env(env_id):
    spec = get_env_spec(env_id)
    plain = _rollout(spec.make(), seed=11, action_seed=5, max_steps=300)
    wrapped = _rollout(
        make_env(spec, sparse_channel=0, p_rel=1.0, seed=0), seed=11, action_seed=5, max_steps=300
    )
    np.testing.assert_array_equal(plain[0], wrapped[0])  # rewards
    np.testing.assert_array_equal(plain[3], wrapped[3])  # observations unchanged
    assert plain[4:] == wrapped[4:]


def test_partial_release_sums_match_truth_and_are_seeded():
    spec = get_env_spec("mo-hopper-v5")
    patterns = []
    for _ in range(2):
        env = make_env(spec, sparse_channel=0, p_rel=0.3, seed=123)
        env.action_space.seed(0)
        pattern = []
        for episode in range(5):
            emitted, true, released, _, _, _ = _rollout(env, seed=episode, action_seed=episode)
            np.testing.assert_allclose(emitted[:, 0].sum(), true[:, 0].sum(), rtol=1e-5, atol=1e-4)
            flags = np.array([r[0] for r in released])
            assert flags[-1]
            # Each released value equals the sum of the true rewards since the previous release.
            starts = np.r_[0, np.flatnonzero(flags)[:-1] + 1]
            for start, end in zip(starts, np.flatnonzero(flags)):
                assert emitted[end, 0] == pytest.approx(true[start : end + 1, 0].sum(), rel=1e-5, abs=1e-4)
            pattern.append(flags)
        patterns.append(pattern)
    total_releases = sum(int(f.sum()) for f in patterns[0])
    total_steps = sum(len(f) for f in patterns[0])
    assert total_releases > 5  # releases happen mid-episode too, not only at the end
    assert 0.15 < total_releases / total_steps < 0.6
    for a, b in zip(*patterns):
        np.testing.assert_array_equal(a, b)  # same seed -> same release steps


def test_release_draws_do_not_touch_env_rng():
    spec = TOY_SPEC
    runs = [
        _rollout(make_env(spec, sparse_channel=0, p_rel=p, seed=7), seed=2, action_seed=2)[3]
        for p in (0.0, 0.5)
    ]
    np.testing.assert_array_equal(*runs)


def test_wrapper_rejects_bad_probabilities():
    env = TOY_SPEC.make()
    with pytest.raises(ValueError, match="release_prob"):
        SparseRewardWrapper(env, [0.5])
    with pytest.raises(ValueError, match="release_prob"):
        SparseRewardWrapper(env, [1.5, 1.0])
    with pytest.raises(ValueError, match="env.p_rel"):
        release_probabilities(2, 0, -0.1)
    with pytest.raises(ValueError, match="env.sparse_channel"):
        release_probabilities(2, 2, 0.0)


def test_toy_env_symmetry_maps_trajectories_to_trajectories():
    """Reflecting the start state and every action reflects the whole trajectory and keeps the rewards."""
    env_a, env_b = TOY_SPEC.make().unwrapped, TOY_SPEC.make().unwrapped
    env_a.reset(seed=0)
    env_b.reset(seed=0)
    env_b._p = -env_a._p  # start from the reflected state
    L, K = TOY_SPEC.obs_reflection(), TOY_SPEC.act_reflection()
    rng = np.random.default_rng(0)
    for _ in range(50):
        action = rng.uniform(-1, 1, size=2).astype(np.float32)
        obs_a, r_a, term_a, _, _ = env_a.step(action)
        obs_b, r_b, term_b, _, _ = env_b.step(K * action)
        np.testing.assert_allclose(obs_b, L * obs_a, atol=1e-6)
        np.testing.assert_allclose(r_a, r_b, atol=1e-5)
        assert term_a == term_b
        if term_a:
            break


def test_toy_env_episode_lengths_vary():
    env = TOY_SPEC.make()
    lengths = {len(_rollout(env, seed=s, action_seed=s)[0]) for s in range(20)}
    assert len(lengths) > 5


@pytest.mark.parametrize("p_rel", [0.0, 0.3])
@pytest.mark.parametrize("env_id", MUJOCO_IDS)
def test_gymnasium_env_checker_passes_on_the_sparse_env(env_id, p_rel):
    """gymnasium's own checker: the wrapped env rebuilds from its spec (the wrapper records its constructor
    arguments) and a seeded reset fixes every draw, the release draws included (same seed and action, same
    emitted reward)."""
    import warnings

    from gymnasium.utils.env_checker import check_env

    env = make_env(get_env_spec(env_id), sparse_channel=0, p_rel=p_rel, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its notes on vector rewards and infinite observation bounds
        check_env(env, skip_render_check=True)


def test_the_wrapped_env_rebuilds_from_its_spec():
    import gymnasium as gym

    env = make_env(get_env_spec("mo-swimmer-v5"), sparse_channel=0, p_rel=0.25, seed=5)
    again = gym.make(env.spec)
    assert isinstance(again, SparseRewardWrapper)
    np.testing.assert_array_equal(again.release_prob, [0.25, 1.0])
    a, b = (_rollout(e, seed=3, action_seed=3, max_steps=60)[0] for e in (env, again))
    np.testing.assert_array_equal(a, b)  # same emitted rewards, releases included


def test_a_seeded_reset_reseeds_the_release_draws_and_an_unseeded_one_continues_them():
    def flags(env, seed):
        return np.array([r[0] for r in _rollout(env, seed=seed, action_seed=0, max_steps=200)[2]])

    spec = TOY_SPEC
    # The constructor's seed does not matter once a reset is seeded: reset(seed=s) fixes the draws.
    first = flags(make_env(spec, sparse_channel=0, p_rel=0.5, seed=1), seed=4)
    np.testing.assert_array_equal(first, flags(make_env(spec, sparse_channel=0, p_rel=0.5, seed=99), seed=4))
    assert not np.array_equal(first, flags(make_env(spec, sparse_channel=0, p_rel=0.5, seed=1), seed=5))
    # An unseeded reset continues the stream (a run's later episodes): not the seeded episode's draws again.
    env = make_env(spec, sparse_channel=0, p_rel=0.5, seed=1)
    flags(env, seed=4)
    obs, _ = env.reset()
    env.action_space.seed(0)
    later = []
    for _ in range(len(first)):
        obs, _, terminated, truncated, info = env.step(env.action_space.sample())
        later.append(info["released"][0])
        if terminated or truncated:
            break
    assert not np.array_equal(np.array(later), first[: len(later)])

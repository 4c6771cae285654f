"""Redistribution shapers (none / resymnet / uniform / random), the factory and replay relabelling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from prism.data.features import FeatureLayout
from prism.envs import TOY_SPEC, make_env
from prism.plugins.registry import REWARDS
from prism.reward import (
    PassThroughShaper,
    PredictedRewardShaper,
    RandomShaper,
    UniformShaper,
    build_features,
    make_shaper,
    relabel_rewards,
)
from prism.reward.model import RewardModelBase
from prism.reward.models.resymnet import ReSymNetEnsemble, ReSymNetRewardModel

ROOT = Path(__file__).resolve().parents[1]


def _model(in_features: int, use_dense: bool = True, seed: int = 0) -> ReSymNetRewardModel:
    torch.manual_seed(seed)
    model = ReSymNetRewardModel(
        ReSymNetEnsemble(3, in_features, hidden=16, member_seeds=[seed, seed + 1, seed + 2]), use_dense
    )
    with torch.no_grad():  # a non-trivial model (the real init predicts ≈ 0)
        model.net.out.weight.normal_()
    model.set_scaler(torch.randn(in_features), torch.rand(in_features) + 0.5)
    return model.eval()


def _run_through(shaper, n_steps: int = 400, p_rel: float = 0.2, seed: int = 0):
    """Drive the toy env through the sparse wrapper; returns (pushed steps, emitted transitions, released sums)."""
    env = make_env(TOY_SPEC, sparse_channel=0, p_rel=p_rel, seed=seed)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    out, segments, current = [], [], []
    for _ in range(n_steps):
        action = rng.uniform(-1, 1, 2).astype(np.float32)
        next_obs, reward, term, trunc, info = env.step(action)
        released = bool(info["released"][0])
        current.append(np.asarray(info["true_reward"]))
        ready = shaper.push(obs, action, reward, next_obs, term, trunc, np.array([0.5, 0.5]), released)
        holding = isinstance(shaper, UniformShaper | RandomShaper)
        if released:
            segments.append((len(current), float(reward[0]), np.stack(current)))
            current = []
        # Holding shapers emit a whole segment on its release step and nothing before; others one per step.
        expected = (segments[-1][0] if released else 0) if holding else 1
        assert len(ready) == expected
        out.extend(ready)
        obs = next_obs
        if term or trunc:
            obs, _ = env.reset()
    return out, segments


@pytest.mark.parametrize("shaper", [UniformShaper(0), RandomShaper(0, seed=1)])
def test_uniform_and_random_sum_to_released_reward_per_segment(shaper):
    out, segments = _run_through(shaper)
    assert len(segments) > 10 and any(length > 1 for length, _, _ in segments)
    i = 0
    for length, released_sum, true_steps in segments:
        chunk = out[i : i + length]
        i += length
        total = sum(float(tr.reward[0]) for tr in chunk)
        assert total == pytest.approx(released_sum, rel=1e-4, abs=1e-4)
        assert released_sum == pytest.approx(float(true_steps[:, 0].sum()), rel=1e-4, abs=1e-4)
        # Dense channel untouched.
        np.testing.assert_allclose([tr.reward[1] for tr in chunk], true_steps[:, 1], rtol=1e-6)
        if isinstance(shaper, UniformShaper):
            np.testing.assert_allclose(
                [tr.reward[0] for tr in chunk], released_sum / length, rtol=1e-5, atol=1e-6
            )
    assert i == len(out)


def test_random_is_seeded_and_not_uniform():
    a, _ = _run_through(RandomShaper(0, seed=7), n_steps=100)
    b, _ = _run_through(RandomShaper(0, seed=7), n_steps=100)
    c, _ = _run_through(RandomShaper(0, seed=8), n_steps=100)
    ra, rb, rc = (np.array([t.reward[0] for t in x]) for x in (a, b, c))
    np.testing.assert_array_equal(ra, rb)
    assert not np.allclose(ra, rc)


def test_holding_shaper_reset_drops_pending():
    shaper = UniformShaper(0)
    z = np.zeros(2, dtype=np.float32)
    assert shaper.push(z, z, np.array([0.0, -1.0]), z, False, False, z, False) == []
    shaper.reset()
    out = shaper.push(z, z, np.array([4.0, -1.0], dtype=np.float32), z, True, False, z, True)
    assert len(out) == 1 and out[0].reward[0] == 4.0 and out[0].terminated


def test_resymnet_shaper_predicts_from_h_t_and_swaps_model():
    model = _model(9)
    shaper = PredictedRewardShaper(model, sparse_channel=0)
    out, _ = _run_through(shaper, n_steps=30)
    assert len(out) == 30  # one transition per step, at once
    obs = np.stack([t.obs for t in out])
    act = np.stack([t.action for t in out])
    rew = np.stack([t.reward for t in out])
    expected = model.predict(build_features(obs, act, rew, 0, True))
    np.testing.assert_allclose(rew[:, 0], expected.numpy(), rtol=1e-5, atol=1e-6)
    # The emitted vector passed in is not modified.
    emitted = np.array([0.0, -0.3], dtype=np.float32)
    z = np.zeros(6, dtype=np.float32)
    shaper.push(z, np.zeros(2, dtype=np.float32), emitted, z, False, False, None, False)
    assert emitted[0] == 0.0
    # A refit swaps the model; the next prediction uses it (w/o dense: h_t = [s, a]).
    shaper.model = _model(8, use_dense=False, seed=5)
    tr = shaper.push(obs[0], act[0], rew[0], obs[0], False, False, None, False)[0]
    want = shaper.model.predict(torch.from_numpy(np.concatenate([obs[0], act[0]]))[None])[0]
    assert tr.reward[0] == pytest.approx(float(want), rel=1e-5)
    assert tr.reward[1] == rew[0, 1]


def test_relabel_replaces_only_the_sparse_channel():
    model = _model(9)
    torch.manual_seed(0)
    obs, act, rew = torch.randn(32, 6), torch.randn(32, 2), torch.randn(32, 2)
    out = relabel_rewards(model, obs, act, rew, sparse_channel=0)
    torch.testing.assert_close(out[:, 1], rew[:, 1])
    torch.testing.assert_close(out[:, 0], model.predict(torch.cat([obs, act, rew[:, 1:]], 1)))
    assert not torch.equal(out[:, 0], rew[:, 0])


def test_make_shaper_and_registry():
    assert isinstance(make_shaper("none"), PassThroughShaper)
    assert isinstance(make_shaper("uniform", sparse_channel=0), UniformShaper)
    assert isinstance(make_shaper("random", sparse_channel=1, seed=0), RandomShaper)
    assert isinstance(make_shaper("resymnet", sparse_channel=0, model=_model(9)), PredictedRewardShaper)
    with pytest.raises(ValueError, match="model"):
        make_shaper("resymnet", sparse_channel=0)
    with pytest.raises(ValueError, match="unknown"):
        make_shaper("nope", sparse_channel=0)
    assert {"none", "resymnet", "uniform", "random"} <= set(REWARDS.names())
    uniform = REWARDS.entry("reward.name", "uniform")
    assert not uniform.needs_model and REWARDS.entry("reward.name", "resymnet").model == "resymnet"
    assert isinstance(uniform.shaper_factory()(sparse_channel=0, model=None, seed=0), UniformShaper)


def test_reward_config_merges_shipped_overlays():
    from omegaconf import OmegaConf

    from prism.reward.config import ReSymNetConfig

    for file, key, value in (
        ("conf/ablation/wo_dense.yaml", "use_dense_features", False),
        ("conf/ablation/random.yaml", "name", "random"),
        ("conf/ablation/wo_ensemble.yaml", "ensemble_size", 1),
    ):
        merged = OmegaConf.merge(OmegaConf.structured(ReSymNetConfig), OmegaConf.load(file).reward)
        cfg = OmegaConf.to_object(merged)
        assert isinstance(cfg, ReSymNetConfig) and getattr(cfg, key) == value
        cfg.validate()
    with pytest.raises(ValueError, match="reward.patience"):
        ReSymNetConfig(patience=0).validate()


class _LinearModel(RewardModelBase):
    """A stand-in reward model, ``r̂(h) = h · coef``: its prediction is computed by hand below."""

    def __init__(self, coef: np.ndarray):
        super().__init__()
        self.coef = torch.as_tensor(coef, dtype=torch.float32)

    def predict(self, features: torch.Tensor) -> torch.Tensor:
        return features @ self.coef


def _hopper_run_with_channel(tmp_path, reward_name: str, channel: int):
    """A hopper run built as ``prism fit`` builds it, hiding ``channel``, ready to step (one member)."""
    from prism.config import load_config
    from prism.run.fit import build_run

    config = load_config(
        [ROOT / "conf" / "quickstart.yaml"],
        [
            f"reward.name={reward_name}",
            f"env.sparse_channel={channel}",
            "agent.learning_starts=1000",  # random actions throughout: no update is needed here
            "agent.buffer_size=2000",
            f"run_dir={tmp_path / 'run'}",
        ],
    )
    run = build_run(config, progress_bar=False)
    run.agent.setup("fit")
    run.agent.on_fit_start()
    return run.agent


def _record_env_steps(agent):
    """Record every (obs, action, true reward, emitted reward, episode end) the agent's env produces."""
    env, steps = agent.envs[0], []
    step = env.step

    def recording_step(action):
        obs = agent._obs[0].copy()
        next_obs, reward, terminated, truncated, info = step(action)
        steps.append(
            (obs, np.array(action), info["true_reward"].copy(), reward.copy(), terminated or truncated)
        )
        return next_obs, reward, terminated, truncated, info

    env.step = recording_step
    return steps


@pytest.mark.parametrize("channel", [2, -1])  # hopper's control cost (issue 31: every other test shapes 0)
def test_resymnet_shaping_of_a_non_zero_channel_through_the_agent(tmp_path, channel):
    """The agent's replay holds r̂(h_t) in the configured channel, h_t = [s_t, a_t, the other channels' true
    rewards], and the emitted (true) dense rewards in the others — checked step by step against values
    computed here by hand, with numpy, from what the env returned."""
    agent = _hopper_run_with_channel(tmp_path, "resymnet", channel)
    coef = np.random.default_rng(0).normal(size=11 + 3 + 2).astype(np.float32)
    agent.shapers[0].model = _LinearModel(coef)  # what the loop installs after a reward fit
    steps = _record_env_steps(agent)
    for _ in range(60):
        agent.env_step()
    stored = agent.buffer.all(0).reward.cpu().numpy()
    assert stored.shape == (60, 3)
    for t, (obs, action, true, emitted, _) in enumerate(steps):
        assert emitted[:2] == pytest.approx(true[:2]) and true[2] != 0.0  # channels 0, 1 dense; 2 hidden
        h = np.concatenate(
            [obs, action, true[:2]]
        )  # h_t: the dense channels in order, the hidden one left out
        assert stored[t, 2] == pytest.approx(float(h @ coef), rel=1e-4, abs=1e-4)
        np.testing.assert_allclose(stored[t, :2], true[:2], rtol=1e-6)


def test_uniform_shaping_of_a_non_zero_channel_through_the_agent(tmp_path):
    """reward.name=uniform with channel 2 hidden: every step of an episode (p_rel = 0: one segment) stores
    R/T in channel 2, R the episode's true control-cost sum, and the true dense rewards in channels 0 and 1."""
    agent = _hopper_run_with_channel(tmp_path, "uniform", 2)
    steps = _record_env_steps(agent)
    while sum(end for *_, end in steps) < 3:  # three whole episodes (random hopper episodes are short)
        agent.env_step()
    ends = [t for t, (*_, end) in enumerate(steps) if end][:3]
    stored = agent.buffer.all(0).reward.cpu().numpy()
    assert len(stored) >= ends[-1] + 1
    start = 0
    for end in ends:
        true = np.stack([s[2] for s in steps[start : end + 1]])
        np.testing.assert_allclose(stored[start : end + 1, 2], true[:, 2].sum() / len(true), rtol=1e-5)
        np.testing.assert_allclose(stored[start : end + 1, :2], true[:, :2], rtol=1e-6)
        start = end + 1


class _DenseAndNextObsProbe(RewardModelBase):
    """A model reading every column group: ``[s_t, a_t, r_dense_t, s_{t+1}] @ w``."""

    inputs = FeatureLayout(dense=True, next_obs=True)

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.register_buffer("weight", weight)

    def predict(self, features: torch.Tensor) -> torch.Tensor:
        return features @ self.weight

    def to_dict(self) -> dict:
        return {"weight": self.weight}


def test_the_shaper_builds_a_models_features_from_its_layout_dense_rewards_and_next_observation_alike():
    rng = np.random.default_rng(3)
    obs, nxt, act = rng.normal(size=4), rng.normal(size=4), rng.uniform(-1, 1, 2)
    reward = rng.normal(size=3).astype(np.float32)
    model = _DenseAndNextObsProbe(torch.tensor(rng.normal(size=4 + 2 + 2 + 4), dtype=torch.float32))
    shaper = PredictedRewardShaper(model, sparse_channel=1)
    (shaped,) = shaper.push(obs, act, reward, nxt, False, False, np.ones(3), False)
    h = np.concatenate([obs, act, np.delete(reward, 1), nxt]).astype(np.float32)
    assert shaped.reward[1] == pytest.approx(float(h @ model.weight.numpy()), rel=1e-5)
    assert torch.equal(model.features(obs, act, reward, 1, nxt), torch.from_numpy(h))
    assert np.array_equal(np.delete(shaped.reward, 1), np.delete(reward, 1))  # the dense channels as emitted

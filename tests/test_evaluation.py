"""Batched evaluation (docs/method.md §9) against episode-by-episode references written here, and the
callback."""

from __future__ import annotations

import csv
import os
from typing import Any

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

from prism.envs import TOY_SPEC, EnvSpec
from prism.loop import (
    EvalConfig,
    EvalEnvPool,
    EvaluationCallback,
    FinalEvalConfig,
    evaluate_policy,
    pair_seeds,
)
from prism.metrics import expected_utility, hypervolume, pareto_front, variance_objective

WEIGHTS = np.array([[1.0, 0.0], [0.7, 0.3], [0.3, 0.7], [0.0, 1.0]])
EUM_W = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]])
PREFS = np.array([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]])


def linear_policy(seed: int = 0):
    """A fixed weight-conditioned deterministic policy for the toy env."""
    gen = torch.Generator().manual_seed(seed)
    mat = torch.randn(TOY_SPEC.obs_dim + TOY_SPEC.n_objectives, TOY_SPEC.act_dim, generator=gen)

    def act(obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return torch.tanh(torch.cat([obs, weight], dim=-1) @ mat)

    return act


def reference_episode(act, spec, weight, env_seed, gamma):
    """One episode stepped on its own: (discounted return, undiscounted return, length)."""
    env = spec.make()
    obs, _ = env.reset(seed=env_seed)
    disc, undisc, scale, steps = np.zeros(spec.n_objectives), np.zeros(spec.n_objectives), 1.0, 0
    while True:
        a = act(torch.as_tensor(obs[None]), torch.as_tensor(weight[None], dtype=torch.float32))[0].numpy()
        obs, reward, terminated, truncated, _ = env.step(a)
        disc += scale * np.asarray(reward, dtype=np.float64)
        undisc += reward
        scale *= gamma
        steps += 1
        if terminated or truncated:
            return disc, undisc, steps


def test_batched_rollout_equals_episode_by_episode():
    act, episodes, seed, gamma = linear_policy(), 3, 7, 0.99
    result = evaluate_policy(
        act, TOY_SPEC, WEIGHTS, episodes, gamma=gamma, seed=seed, eum_weights=EUM_W, vo_preferences=PREFS
    )
    seeds = pair_seeds(seed, len(WEIGHTS) * episodes)
    ref_disc = np.zeros((len(WEIGHTS), episodes, 2))
    ref_undisc = np.zeros_like(ref_disc)
    ref_len = np.zeros((len(WEIGHTS), episodes), dtype=int)
    for i, w in enumerate(WEIGHTS):
        for e in range(episodes):
            ref_disc[i, e], ref_undisc[i, e], ref_len[i, e] = reference_episode(
                act, TOY_SPEC, w, seeds[i * episodes + e], gamma
            )
    # the check only means something if envs finish at different times
    assert len(np.unique(ref_len)) > 3
    np.testing.assert_array_equal(result.lengths, ref_len)
    np.testing.assert_allclose(result.returns, ref_disc, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result.undiscounted_returns, ref_undisc, rtol=1e-5, atol=1e-6)
    assert not np.allclose(ref_disc, ref_undisc)

    # per-weight statistics: mean and *population* std over episodes
    np.testing.assert_allclose(result.mean, ref_disc.mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result.std, ref_disc.std(axis=1, ddof=0), rtol=1e-4, atol=1e-6)
    assert result.total_steps == ref_len.sum()

    # metrics on the reference statistics
    ref_mean, ref_std = ref_disc.mean(axis=1), ref_disc.std(axis=1)
    assert result.hv == pytest.approx(hypervolume(ref_mean, TOY_SPEC.ref_point), rel=1e-5)
    assert result.eum == pytest.approx(expected_utility(ref_mean, EUM_W), rel=1e-5, abs=1e-6)
    assert result.vo == pytest.approx(variance_objective(ref_mean, ref_std, PREFS), rel=1e-5, abs=1e-6)
    assert result.cardinality == len(pareto_front(ref_mean))

    # same seed -> same evaluation; another seed -> other episodes
    again = evaluate_policy(
        act, TOY_SPEC, WEIGHTS, episodes, seed=seed, eum_weights=EUM_W, vo_preferences=PREFS
    )
    np.testing.assert_array_equal(again.returns, result.returns)
    other = evaluate_policy(act, TOY_SPEC, WEIGHTS, episodes, seed=8, eum_weights=EUM_W, vo_preferences=PREFS)
    assert not np.array_equal(other.lengths, result.lengths)


class CountingEnv(gym.Env):
    """Reward ``[1, t]`` at step t (t = 0, 1, …); the episode lasts ``3 + seed % 4`` steps and ends by
    termination when that length is even, by truncation when it is odd."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.steps_taken_after_end = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.length, self.t = 3 + int(seed) % 4, 0
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        if self.t >= self.length:
            self.steps_taken_after_end += 1
        reward = np.array([1.0, float(self.t)], dtype=np.float32)
        self.t += 1
        end = self.t >= self.length
        return (
            np.full(1, self.t, dtype=np.float32),
            reward,
            end and self.length % 2 == 0,
            end and self.length % 2 == 1,
            {},
        )


COUNT_SPEC = EnvSpec(
    id="test/Counting-v0",
    objective_names=("one", "time"),
    obs_dim=1,
    act_dim=1,
    sparse_channel=0,
    symmetric_obs=(0,),
    asymmetric_obs=(),
    symmetric_act=(0,),
    ref_point=(-1.0, -1.0),
    symreg_lambda=0.0,
    max_episode_steps=50,
)


def test_discounting_by_hand_and_finished_envs_stop():
    gamma, episodes, seed = 0.5, 4, 3
    pool = EvalEnvPool(COUNT_SPEC, env_fn=CountingEnv)
    weights = np.array([[0.5, 0.5], [0.2, 0.8]])
    result = evaluate_policy(
        lambda o, w: torch.zeros(o.shape[0], 1),
        COUNT_SPEC,
        weights,
        episodes,
        gamma=gamma,
        seed=seed,
        eum_weights=EUM_W,
        vo_preferences=PREFS,
        pool=pool,
    )
    seeds = pair_seeds(seed, len(weights) * episodes)
    lengths = np.array([3 + s % 4 for s in seeds]).reshape(len(weights), episodes)
    np.testing.assert_array_equal(result.lengths, lengths)
    assert len(np.unique(lengths)) > 1
    for i in range(len(weights)):
        for e in range(episodes):
            T = lengths[i, e]
            # Σ_{t<T} γ^t [1, t] and Σ_{t<T} [1, t], written out
            disc = [sum(gamma**t for t in range(T)), sum(t * gamma**t for t in range(T))]
            undisc = [T, T * (T - 1) / 2]
            np.testing.assert_allclose(result.returns[i, e], disc, rtol=1e-12)
            np.testing.assert_allclose(result.undiscounted_returns[i, e], undisc, rtol=1e-12)
    assert all(env.steps_taken_after_end == 0 for env in pool.envs)
    pool.close()


def test_equivariance_error():
    # μ linear in the reflected coordinates only: μ(L s) = −μ(s) = K μ(s) exactly
    gen = torch.Generator().manual_seed(1)
    mat = torch.randn(4, 2, generator=gen)

    def equivariant_mean(obs, w):
        return obs[:, 2:6] @ mat

    const = torch.tensor([0.3, -1.2])

    def constant_mean(obs, w):
        return const.expand(obs.shape[0], 2)

    kwargs = dict(weights=WEIGHTS[:2], episodes=2, eum_weights=EUM_W, vo_preferences=PREFS)
    act = linear_policy()
    good = evaluate_policy(act, TOY_SPEC, mean_fn=equivariant_mean, **kwargs)
    assert good.equivariance_error is not None and good.equivariance_error <= 1e-6
    # ‖c − K c‖₁ = ‖2c‖₁ on every state
    bad = evaluate_policy(act, TOY_SPEC, mean_fn=constant_mean, **kwargs)
    assert bad.equivariance_error == pytest.approx(2 * float(const.abs().sum()), rel=1e-6)
    assert evaluate_policy(act, TOY_SPEC, **kwargs).equivariance_error is None


# ---- the callback ---------------------------------------------------------------------------------------
class FakeAgent(L.LightningModule):
    """Stands in for the CAPQL module: one env step per training batch, a linear deterministic policy."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.register_buffer("env_steps", torch.zeros((), dtype=torch.long))
        self.actor = nn.Linear(TOY_SPEC.obs_dim + TOY_SPEC.n_objectives, TOY_SPEC.act_dim)
        self.modes_seen: list[bool] = []

    @property
    def env_step_count(self) -> int:
        return int(self.env_steps)

    def policy_mean(self, obs, weight):
        return self.actor(torch.cat([obs, weight], dim=-1))

    def policy_mean_member(self, member, obs, weight):
        return self.policy_mean(obs, weight)

    def act_member(self, member, obs, weight):
        return self.act(obs, weight)

    def pause_at(self, env_step):
        pass  # one env step per batch: every step ends a batch

    def act(self, obs, weight, deterministic: bool = True):
        assert deterministic
        self.modes_seen.append(self.training)
        return torch.tanh(self.policy_mean(obs, weight))

    def training_step(self, batch, batch_idx):
        self.env_steps += 1

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.zeros(25, 1), batch_size=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def test_callback_writes_rows_and_tensorboard(tmp_path):
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    torch.manual_seed(0)
    config = EvalConfig(
        every=10,
        num_weights=3,
        episodes=2,
        eum_weights=3,
        vo_preferences=5,
        seed=5,
        final=FinalEvalConfig(num_weights=3, episodes=2),
    )
    callback = EvaluationCallback(TOY_SPEC, config, run_dir=tmp_path / "run")
    agent = FakeAgent()
    logger = TensorBoardLogger(save_dir=tmp_path, name="tb")
    trainer = L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=logger,
        callbacks=[callback],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,  # 25 batches: Lightning warns that the default 50 would log none
    )
    trainer.fit(agent)

    with (tmp_path / "run" / "eval.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    header = list(rows[0])
    assert header[:5] == ["env_steps", "hv", "eum", "vo", "cardinality"]
    assert {"return_outward", "return_energy", "undiscounted_return_outward"} <= set(header)
    assert "wall_time_s" not in header  # eval.csv must be reproducible byte for byte
    # every 10 env steps, then the final evaluation at the end of fit (25 steps)
    assert [(int(r["env_steps"]), r["final"]) for r in rows] == [(10, "0"), (20, "0"), (25, "1")]
    assert all(float(r["equivariance_error"]) > 0 for r in rows)
    assert all(not mode for mode in agent.modes_seen) and agent.training
    # the schedule is checkpointed with the callback: a resumed run evaluates next at 30 env steps
    assert callback.state_dict() == {"next_eval": 30, "last_eval_step": 25, "final_done": True}

    # the last row and last_result agree with a direct evaluation of the same (fixed) policy
    last = callback.last_result
    assert last is not None
    direct = evaluate_policy(
        lambda o, w: agent.act(o, w),
        TOY_SPEC,
        config.num_weights,
        config.episodes,
        seed=config.seed,
        eum_weights=config.eum_weights,
        vo_preferences=config.vo_preferences,
    )
    np.testing.assert_allclose(last.returns, direct.returns, rtol=1e-6)
    assert float(rows[-1]["hv"]) == pytest.approx(direct.hv, rel=1e-9)
    assert float(rows[-1]["return_energy"]) == pytest.approx(direct.mean[:, 1].mean(), rel=1e-9)
    assert int(rows[-1]["cardinality"]) == direct.cardinality

    events = EventAccumulator(logger.log_dir, size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    tags = events.Tags()
    for tag in ("eval/hv", "eval/eum", "eval/vo", "eval/cardinality", "eval/equivariance_error"):
        assert [e.step for e in events.Scalars(tag)] == [10, 20], tag
        assert [e.step for e in events.Scalars(tag.replace("eval/", "eval_final/"))] == [25], tag
    assert [e.value for e in events.Scalars("eval_final/hv")][-1] == pytest.approx(direct.hv, rel=1e-5)
    assert "eval/front" in tags["images"] and len(events.Images("eval/front")) == 2
    assert len(events.Images("eval_final/front")) == 1


def test_worker_processes_give_the_same_evaluation_and_pool_reuse():
    act = linear_policy(3)
    kwargs = dict(episodes=3, seed=11, eum_weights=EUM_W, vo_preferences=PREFS)
    serial = evaluate_policy(act, TOY_SPEC, WEIGHTS, num_workers=0, **kwargs)
    pool = EvalEnvPool(TOY_SPEC, num_workers=2)
    try:
        forked = evaluate_policy(act, TOY_SPEC, WEIGHTS, pool=pool, **kwargs)
        assert pool.num_workers == 2 and len(pool.envs) < len(WEIGHTS) * 3
        np.testing.assert_array_equal(forked.lengths, serial.lengths)
        np.testing.assert_allclose(forked.returns, serial.returns, rtol=1e-6, atol=1e-7)
        # a smaller evaluation on the same pool uses the first envs only (chunk boundaries cut mid-way)
        small = evaluate_policy(act, TOY_SPEC, WEIGHTS[:2], pool=pool, **kwargs)
        np.testing.assert_allclose(small.returns, serial.returns[:2], rtol=1e-6, atol=1e-7)
    finally:
        pool.close()
    assert pool.num_workers == 0


def test_worker_errors_surface():
    parent = os.getpid()

    def env_failing_in_workers():
        if os.getpid() != parent:
            raise ValueError("cannot build this env")
        return CountingEnv()

    pool = EvalEnvPool(COUNT_SPEC, env_fn=env_failing_in_workers, num_workers=1)
    with pytest.raises(RuntimeError, match="cannot build this env"):
        pool.ensure(4)
    pool.close()


def test_callback_on_the_capql_agent(tmp_path):
    """The contract with the real agent: ``act``, ``policy_mean`` and the env-step clock."""
    from prism.agents.capql import CAPQLModule
    from prism.agents.config import CAPQLConfig
    from prism.envs import make_env

    cfg = CAPQLConfig(
        learning_starts=10, actor_hidden=[16], critic_hidden=[16], batch_size=8, buffer_size=200
    )
    agent = CAPQLModule(cfg, TOY_SPEC, lambda _member: make_env(TOY_SPEC), target_env_steps=30)
    config = EvalConfig(
        every=12, num_weights=3, episodes=2, eum_weights=3, vo_preferences=5, final=FinalEvalConfig(3, 2)
    )
    callback = EvaluationCallback(TOY_SPEC, config, run_dir=tmp_path)
    trainer = L.Trainer(
        max_epochs=-1,
        logger=False,
        callbacks=[callback],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
    )
    trainer.fit(agent)
    assert [row["env_steps"] for row in callback.history] == [12, 24, 30]
    assert callback.last_result is not None and callback.last_result.equivariance_error > 0
    with (tmp_path / "eval.csv").open() as fh:
        assert [int(r["env_steps"]) for r in csv.DictReader(fh)] == [12, 24, 30]

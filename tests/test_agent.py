"""CAPQLModule: preferences, env stepping and storage, RL clock, checkpointing, logging, public API."""

from __future__ import annotations

import math

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch
from gymnasium import spaces

from prism.agents.capql import CAPQLModule
from prism.agents.config import CAPQLConfig
from prism.agents.preferences import cone_weights
from prism.agents.symmetry import equivariance_error, reflection_from_spec
from prism.data.replay import ReplayBatch
from prism.envs import TOY_SPEC, EnvSpec, SparseRewardWrapper, make_env
from prism.reward.shapers import PassThroughShaper

SMALL = dict(actor_hidden=[16], critic_hidden=[16], batch_size=8, buffer_size=500)


def _trainer(**kwargs) -> L.Trainer:
    defaults = dict(
        max_epochs=-1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
        devices=1,
    )
    return L.Trainer(**{**defaults, **kwargs})


# ---- preferences ------------------------------------------------------------------------------------------
def test_cone_weights_two_objectives_within_bounds():
    w = cone_weights(20_000, 2, generator=torch.Generator().manual_seed(0))
    assert w.min() >= 0.29 and w.max() <= 0.71
    assert w.min() < 0.30 and w.max() > 0.70  # the whole cone is covered, not just its centre
    torch.testing.assert_close(w.sum(1), torch.ones(20_000))


def test_cone_weights_three_objectives_angle():
    w = cone_weights(5000, 3, generator=torch.Generator().manual_seed(0))
    cos = (w / w.norm(dim=1, keepdim=True)) @ (torch.ones(3) / math.sqrt(3))
    assert torch.rad2deg(torch.acos(cos.clamp(max=1))).max() <= 22.5 + 1e-3
    assert (w > 0).all()


# ---- a hand-made env with known termination / truncation steps ----------------------------------------
class _CountingEnv(gym.Env):
    """obs = [episode, t]; even episodes terminate at t = 3, odd ones are truncated at t = 4."""

    def __init__(self):
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.reward_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.episode, self.t = -1, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return np.array([self.episode, 0], np.float32), {}

    def step(self, action):
        self.t += 1
        terminated = self.episode % 2 == 0 and self.t == 3
        truncated = self.episode % 2 == 1 and self.t == 4
        reward = np.array([1.0, float(self.t)], np.float32)
        return np.array([self.episode, self.t], np.float32), reward, terminated, truncated, {}


COUNTING_SPEC = EnvSpec(
    id="test/Counting-v0",
    objective_names=("a", "b"),
    obs_dim=2,
    act_dim=2,
    sparse_channel=1,
    symmetric_obs=(),
    asymmetric_obs=(0, 1),
    symmetric_act=(0, 1),
    ref_point=(-1.0, -1.0),
    symreg_lambda=0.0,
)


class _RecordingShaper(PassThroughShaper):
    def __init__(self):
        self.calls: list[tuple] = []

    def push(self, obs, action, reward, next_obs, terminated, truncated, weight, released):
        self.calls.append((obs.copy(), terminated, truncated, weight.copy(), released))
        return super().push(obs, action, reward, next_obs, terminated, truncated, weight, released)


def test_stored_done_is_termination_only_and_truncation_keeps_final_obs():
    cfg = CAPQLConfig(learning_starts=1000, **SMALL)
    # episodes of 3, 4, 3, 4 steps
    module = CAPQLModule(cfg, COUNTING_SPEC, lambda _member: _CountingEnv(), target_env_steps=14)
    _trainer().fit(module)
    b = module.buffer.all()
    episode, t_next = b.next_obs[:, 0], b.next_obs[:, 1]
    terminal = (episode % 2 == 0) & (t_next == 3)
    truncated = (episode % 2 == 1) & (t_next == 4)
    assert terminal.sum() == 2 and truncated.sum() == 2
    assert b.done[terminal].tolist() == [1.0, 1.0]
    assert b.done[truncated].tolist() == [0.0, 0.0]  # truncation bootstraps
    assert b.done[~terminal].sum() == 0
    # The truncated transition's next_obs is the episode's own final state, not the next episode's reset.
    torch.testing.assert_close(b.next_obs[truncated], torch.tensor([[1.0, 4.0], [3.0, 4.0]]))
    torch.testing.assert_close(b.obs[:, 0], b.next_obs[:, 0])  # never crosses an episode boundary


def test_shaper_sees_fresh_cone_weights_and_released_flags_from_the_wrapper():
    shaper = _RecordingShaper()
    cfg = CAPQLConfig(learning_starts=1000, **SMALL)
    factory = lambda _member: SparseRewardWrapper(_CountingEnv(), [1.0, 0.0], seed=0)  # noqa: E731
    module = CAPQLModule(cfg, COUNTING_SPEC, factory, shaper, target_env_steps=7)
    _trainer().fit(module)
    released = [c[4] for c in shaper.calls]
    # channel 1 (sparse, p_rel=0) is released exactly at episode ends: steps 3 (terminated) and 7 (truncated)
    assert released == [False, False, True, False, False, False, True]
    weights = np.stack([c[3] for c in shaper.calls])
    assert len({tuple(w) for w in weights}) == 7  # a fresh weight every step
    assert weights.min() >= 0.29 and weights.max() <= 0.71
    torch.testing.assert_close(module.buffer.all().weight, torch.as_tensor(weights))
    # the emitted (not true) reward is what reaches the buffer: channel 1 is 0 except at releases
    assert module.buffer.all().reward[:, 1].tolist() == [0.0, 0.0, 6.0, 0.0, 0.0, 0.0, 10.0]


def test_dense_env_passes_released_true():
    shaper = _RecordingShaper()
    factory = lambda _member: _CountingEnv()  # noqa: E731
    module = CAPQLModule(CAPQLConfig(**SMALL), COUNTING_SPEC, factory, shaper, target_env_steps=5)
    _trainer().fit(module)
    assert all(c[4] for c in shaper.calls)


# ---- RL clock, updates, checkpointing -------------------------------------------------------------------
def test_env_step_clock_updates_and_resume(tmp_path):
    cfg = CAPQLConfig(learning_starts=20, **SMALL)
    module = CAPQLModule(cfg, TOY_SPEC, lambda _member: make_env(TOY_SPEC), target_env_steps=30)
    seen: list[ReplayBatch] = []
    module.relabel_fn = lambda batch: seen.append(batch) or batch
    critic_before = [p.detach().clone() for p in module.critic.parameters()]
    target_before = [p.detach().clone() for p in module.critic_target.parameters()]
    trainer = _trainer()
    trainer.fit(module)
    assert module.env_steps.item() == 30 and len(module.buffer) == 30
    assert module.n_updates == 11  # one per env step from step 20 on (20..30 inclusive)
    assert len(seen) == 11 and seen[0].obs.shape == (1, 8, 6)  # [members, batch, obs]
    assert all(not torch.equal(a, b) for a, b in zip(critic_before, module.critic.parameters()))
    assert all(not torch.equal(a, b) for a, b in zip(target_before, module.critic_target.parameters()))

    # extend the target: the same module continues where it stopped, buffer kept
    module.target_env_steps = 45
    _trainer().fit(module)
    assert module.env_steps.item() == 45 and len(module.buffer) == 45 and module.n_updates == 26

    # env_steps is checkpointed and restored into the python clock
    path = tmp_path / "agent.ckpt"
    torch.save(module.state_dict(), path)
    fresh = CAPQLModule(cfg, TOY_SPEC, lambda _member: make_env(TOY_SPEC), target_env_steps=45)
    fresh.load_state_dict(torch.load(path))
    assert fresh.env_steps.item() == 45 and fresh.target_reached
    torch.testing.assert_close(
        fresh.act(torch.zeros(2, 6), torch.full((2, 2), 0.5)),
        module.act(torch.zeros(2, 6), torch.full((2, 2), 0.5)),
    )


class _PolyakRecorder(L.Callback):
    """Snapshots online and target critics around every training batch (one env step + at most one update)."""

    def __init__(self):
        self.records: list[tuple[list[torch.Tensor], ...]] = []

    @staticmethod
    def _copy(net: torch.nn.Module) -> list[torch.Tensor]:
        return [p.detach().clone().double() for p in net.parameters()]

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self._before = (self._copy(module.critic), self._copy(module.critic_target), module.n_updates)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        online_before, target_before, updates_before = self._before
        if module.n_updates == updates_before + 1:
            self.records.append(
                (online_before, target_before, self._copy(module.critic), self._copy(module.critic_target))
            )


def test_polyak_update_is_exactly_one_minus_tau_target_plus_tau_online_after_the_critic_step():
    tau = 0.3  # large, so that mixing in the wrong online weights or the wrong τ is far outside the tolerance
    # one (env step, update) per batch: the recorder snapshots the critics around every single update
    cfg = CAPQLConfig(learning_starts=10, tau=tau, steps_per_batch=1, **SMALL)
    module = CAPQLModule(cfg, TOY_SPEC, lambda _member: make_env(TOY_SPEC), target_env_steps=16)
    recorder = _PolyakRecorder()
    _trainer(callbacks=[recorder]).fit(module)
    assert len(recorder.records) == 7  # updates at env steps 10..16
    for online_before, target_before, online_after, target_after in recorder.records:
        for tb, ta, oa in zip(target_before, target_after, online_after):
            # θ̄' = (1 − τ) θ̄ + τ θ, with θ the critic *after* this update's gradient step (float64 reference).
            torch.testing.assert_close(ta, (1 - tau) * tb + tau * oa, atol=1e-7, rtol=0)
        # ... and the check can tell: the pre-step online weights give a different target.
        stale = max(
            ((1 - tau) * tb + tau * ob - ta).abs().max().item()
            for tb, ta, ob in zip(target_before, target_after, online_before)
        )
        assert stale > 1e-5


def test_hparams_hold_no_envs_or_modules():
    module = CAPQLModule(
        CAPQLConfig(**SMALL), TOY_SPEC, lambda _member: make_env(TOY_SPEC), symreg_lambda=0.3
    )
    assert set(module.hparams) == {"agent", "env_id", "seeds", "symreg_lambda", "sparse_channel"}
    assert module.hparams["symreg_lambda"] == 0.3 and module.envs == []  # envs not built in __init__
    assert module.hparams["agent"]["actor_hidden"] == [16]


def test_symreg_lambda_resolution():
    env = lambda _member: make_env(TOY_SPEC)  # noqa: E731
    assert CAPQLModule(CAPQLConfig(**SMALL), TOY_SPEC, env).symreg_lambda == TOY_SPEC.symreg_lambda
    assert CAPQLModule(CAPQLConfig(symreg_lambda=0.0, **SMALL), TOY_SPEC, env).effective_symreg_lambda == 0.0
    assert (
        CAPQLModule(CAPQLConfig(symmetry_mode="none", **SMALL), TOY_SPEC, env).effective_symreg_lambda == 0.0
    )
    with pytest.raises(ValueError, match="agent.symmetry_mode"):
        CAPQLConfig(symmetry_mode="bogus")  # type: ignore[arg-type]


# ---- public API --------------------------------------------------------------------------------------
def _hand_policy_mean(base, obs: torch.Tensor, w: torch.Tensor, exact: bool) -> torch.Tensor:
    """μ(s, w) written out from the actor's Linear layers (x Wᵀ + b, ReLU between), independent of forward().

    In exact mode the orbit average ½(μ(s) + K μ(L s)) with L, K built from the toy spec's index lists.
    """
    # layer j of the (only) member: weights[j][0] is [d_in, d_out] (applied as x W), biases[j][0] is [1, d_out]
    layers = [(w[0], b[0, 0]) for w, b in zip(base.net.weights, base.net.biases)]

    def mean(o: torch.Tensor) -> torch.Tensor:
        h = torch.cat([o, w], dim=1)
        for j, (weight, bias) in enumerate(layers):
            h = h @ weight + bias
            if j < len(layers) - 1:
                h = torch.relu(h)
        return h[:, : TOY_SPEC.act_dim]  # the head's first act_dim outputs are the mean, the rest log-std

    if not exact:
        return mean(obs)
    obs_sign = torch.ones(TOY_SPEC.obs_dim)
    obs_sign[list(TOY_SPEC.symmetric_obs)] = -1.0
    act_sign = torch.ones(TOY_SPEC.act_dim)
    act_sign[list(TOY_SPEC.symmetric_act)] = -1.0
    return 0.5 * (mean(obs) + act_sign * mean(obs * obs_sign))


@pytest.mark.parametrize("mode", ["regularise", "exact"])
def test_act_policy_mean_expert_policy(mode):
    module = CAPQLModule(
        CAPQLConfig(symmetry_mode=mode, **SMALL), TOY_SPEC, lambda _member: make_env(TOY_SPEC)
    )
    obs = torch.randn(5, 6)
    w = module.sample_preferences(5)
    assert w.shape == (5, 2)
    # Non-zero biases, so a forward pass that dropped or misplaced them would show.
    base = module.actor.base if mode == "exact" else module.actor
    with torch.no_grad():
        for bias in base.net.biases:
            bias.uniform_(-0.5, 0.5, generator=torch.Generator().manual_seed(1))
    expected = torch.tanh(_hand_policy_mean(base, obs, w, exact=mode == "exact"))
    torch.testing.assert_close(module.act(obs, w), expected, atol=1e-6, rtol=1e-5)
    sampled = module.act(obs, w, deterministic=False)
    assert (
        sampled.shape == (5, 2) and sampled.abs().max() <= 1 and not torch.equal(sampled, module.act(obs, w))
    )
    policy = module.expert_policy(1)
    a1, a2 = policy(np.ones(6, np.float32)), policy(np.ones(6, np.float32))
    assert a1.shape == (2,) and a1.dtype == np.float32 and np.abs(a1).max() <= 1
    assert not np.array_equal(a1, a2)  # a fresh cone weight per call
    obs_sign, act_sign = reflection_from_spec(TOY_SPEC)
    err = equivariance_error(module.policy_mean, obs, w, obs_sign, act_sign).item()
    assert (err <= 1e-6) if mode == "exact" else (err > 1e-3)


def test_tensorboard_scalars_logged_against_env_steps(tmp_path):
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = CAPQLConfig(learning_starts=20, log_every=25, **SMALL)
    module = CAPQLModule(cfg, TOY_SPEC, lambda _member: make_env(TOY_SPEC), target_env_steps=100)
    logger = TensorBoardLogger(tmp_path, name="run")
    _trainer(logger=logger).fit(module)
    logger.finalize("success")
    events = EventAccumulator(logger.log_dir)
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for tag in (
        "train/critic",
        "train/actor",
        "train/symreg",
        "train/alpha_log_pi",
        "rollout/return_outward",
        "rollout/return_energy",
        "time/env_steps_per_s",
        "time/updates_per_s",
    ):
        assert tag in tags, tag
    assert [e.step for e in events.Scalars("time/env_steps_per_s")] == [25, 50, 75, 100]
    assert [e.step for e in events.Scalars("train/critic")] == [25, 50, 75, 100]
    assert all(math.isfinite(e.value) for e in events.Scalars("train/critic"))
    assert events.Scalars("train/symreg")[-1].value > 0  # λ > 0 on the toy spec


def test_rejects_mixed_precision_instead_of_ignoring_it():
    module = CAPQLModule(
        CAPQLConfig(**SMALL), TOY_SPEC, lambda _member: make_env(TOY_SPEC), target_env_steps=5
    )
    with pytest.raises(ValueError, match="32-bit precision"):
        _trainer(precision="bf16-mixed").fit(module)

"""CAPQL (Lu, Herman & Yu, ICLR 2023) as a LightningModule, with SymReg (SPEC §6, §7).

The module owns one training env and steps it itself: each training "batch" (from an infinite dummy loader)
is one env step followed by one gradient update (after ``learning_starts``). The RL clock is the module's own
``env_steps`` counter (a registered buffer, so checkpoints carry it); ``trainer.global_step`` counts optimiser
steps and is never used. Training stops once ``env_steps >= target_env_steps``.

Data flow of one env step::

    w ~ cone(22.5°)  ->  a = uniform (before learning_starts) | tanh(μ(s, w))  ->  env.step(a)
      -> shaper.push(s, a, r_emitted, s', terminated, truncated, w, released) -> replay buffer (done = terminated)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any

import gymnasium as gym
import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from prism.agents.config import AgentConfig
from prism.agents.losses import capql_actor_loss, capql_critic_loss
from prism.agents.networks import GaussianActor, VectorCriticEnsemble, sample_tanh_gaussian
from prism.agents.preferences import cone_weights
from prism.agents.symmetry import OrbitAveragedActor, reflection_from_spec
from prism.data.replay import ReplayBatch, ReplayBuffer
from prism.envs.spec import EnvSpec
from prism.errors import NonFiniteError, first_non_finite
from prism.reward.shaping import PassThroughShaper, RewardShaper

EnvFactory = Callable[[], gym.Env]
RelabelFn = Callable[[ReplayBatch], ReplayBatch]

_TRAIN_KEYS = ("train/critic", "train/actor", "train/symreg", "train/alpha_log_pi", "train/q_mean")
_WEIGHT_BLOCK = 1024  # preference weights drawn per sampler call (one draw per env step, amortised)


class _Forever(IterableDataset):
    """Yields a dummy item forever: the loader only paces training steps, it never touches the env."""

    def __iter__(self) -> Iterator[int]:
        while True:
            yield 0


class CAPQLModule(L.LightningModule):
    """CAPQL with a weight-conditioned tanh-Gaussian actor, two vector critics and optional SymReg.

    Args:
        config: agent hyperparameters.
        spec: the env's spec (sizes, objectives, reflection symmetry, default λ and sparse channel).
        env_factory: builds the training env (dense, or a :class:`~prism.envs.SparseRewardWrapper`); called in
            ``setup``, never in ``__init__``.
        shaper: turns env steps into buffer transitions (default :class:`PassThroughShaper`: oracle on a
            dense env, baseline on the wrapper's output). Settable.
        symreg_lambda: overrides ``config.symreg_lambda`` (which in turn overrides ``spec.symreg_lambda``).
        sparse_channel: channel whose ``info["released"]`` flag is passed to the shaper (default the spec's).
        target_env_steps: stop training once ``env_steps`` reaches it (None: never stop on env steps).
            Settable, e.g. by a loop callback between phases.
    """

    def __init__(
        self,
        config: AgentConfig,
        spec: EnvSpec,
        env_factory: EnvFactory,
        shaper: RewardShaper | None = None,
        *,
        symreg_lambda: float | None = None,
        sparse_channel: int | None = None,
        target_env_steps: int | None = None,
    ):
        super().__init__()
        self.automatic_optimization = False
        config.validate()
        self.config = config
        self.spec = spec
        self.env_factory = env_factory
        self.shaper: RewardShaper = shaper if shaper is not None else PassThroughShaper()
        self.relabel_fn: RelabelFn | None = None
        self.target_env_steps = target_env_steps
        self.sparse_channel = spec.sparse_channel if sparse_channel is None else sparse_channel

        if symreg_lambda is None:
            symreg_lambda = config.symreg_lambda if config.symreg_lambda is not None else spec.symreg_lambda
        self.symreg_lambda = float(symreg_lambda)
        # 'exact' makes L_eq identically 0 and 'none' switches symmetry off: either way no SymReg term.
        self.effective_symreg_lambda = self.symreg_lambda if config.symmetry_mode == "regularise" else 0.0
        self.save_hyperparameters(
            {
                "agent": asdict(config),
                "env_id": spec.id,
                "symreg_lambda": self.symreg_lambda,
                "sparse_channel": self.sparse_channel,
            }
        )

        n_obj = spec.n_objectives
        if not spec.has_symmetry and (self.effective_symreg_lambda > 0 or config.symmetry_mode == "exact"):
            key = "symmetry_mode" if config.symmetry_mode == "exact" else "symreg_lambda"
            raise ValueError(
                f"agent.{key}: {spec.id} has no reflection symmetry table for SymReg / exact mode"
            )
        # Without a symmetry table there are no (L_g, K_g) at all (never an identity stand-in): the
        # buffers stay None and the SymReg branch, whose λ is 0 then, never reads them.
        reflection = reflection_from_spec(spec) if spec.has_symmetry else None
        self.register_buffer("obs_sign", reflection.obs_sign if reflection else None, persistent=False)
        self.register_buffer("act_sign", reflection.act_sign if reflection else None, persistent=False)
        base_actor = GaussianActor(spec.obs_dim, n_obj, spec.act_dim, config.actor_hidden)
        self.actor: torch.nn.Module = (
            OrbitAveragedActor(base_actor, reflection.obs_sign, reflection.act_sign)
            if config.symmetry_mode == "exact" and reflection is not None
            else base_actor
        )
        self.critic = VectorCriticEnsemble(
            spec.obs_dim + spec.act_dim + n_obj, n_obj, config.critic_hidden, config.n_critics
        )
        self.critic_target = VectorCriticEnsemble(
            spec.obs_dim + spec.act_dim + n_obj, n_obj, config.critic_hidden, config.n_critics
        )
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.critic_target.requires_grad_(False)

        self.register_buffer("env_steps", torch.zeros((), dtype=torch.long))
        self._steps = 0  # python mirror of env_steps: control flow never reads the tensor
        self.register_load_state_dict_post_hook(_sync_env_steps)

        # Runtime state (built in setup / on_fit_start, never pickled into hyperparameters).
        self.env: gym.Env | None = None
        self.buffer: ReplayBuffer | None = None
        self._obs: np.ndarray | None = None
        self._generator: torch.Generator | None = None
        self._weights_t: torch.Tensor | None = None
        self._weights_np: np.ndarray | None = None
        self._weight_cursor = _WEIGHT_BLOCK
        self._episode_return = np.zeros(n_obj, dtype=np.float64)
        self._episode_length = 0
        self._finished_returns: list[np.ndarray] = []
        self._finished_lengths: list[int] = []
        self._train_sums: torch.Tensor | None = None
        self._updates_in_window = 0
        self._window_start: tuple[float, int] | None = None
        self._n_updates = 0
        self.latest_metrics: dict[str, float] = {}

    # ---- public API -------------------------------------------------------------------------------------
    @property
    def env_step_count(self) -> int:
        """Env steps taken so far (the value of the ``env_steps`` buffer, read without a device sync)."""
        return self._steps

    @property
    def n_updates(self) -> int:
        """Gradient updates done so far in this process."""
        return self._n_updates

    def policy_mean(self, obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Pre-tanh mean μ(s, w) ``[B, act_dim]`` of the acting policy (orbit-averaged in ``exact`` mode)."""
        return self.actor(obs, weight)[0]

    @torch.no_grad()
    def act(self, obs: torch.Tensor, weight: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """Actions ``[B, act_dim]`` in ``[−1, 1]`` for a batch of observations and preference weights.

        ``deterministic`` gives ``tanh(μ(s, w))``; otherwise a sample from the tanh-Gaussian.
        """
        mean, log_std = self.actor(obs, weight)
        if deterministic:
            return torch.tanh(mean)
        return sample_tanh_gaussian(mean, log_std)[0]

    def sample_preferences(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``n`` training preferences ``[n, L]`` from the cone around the uniform weight (SPEC §6), drawn
        from ``generator`` (default: the agent's training generator)."""
        return cone_weights(
            n,
            self.spec.n_objectives,
            half_angle=math.radians(self.config.cone_half_angle_deg),
            generator=self._generator if generator is None else generator,
            device=self.device,
        )

    def expert_policy(self, seed: int = 0) -> Callable[[np.ndarray], np.ndarray]:
        """A numpy policy ``obs [obs_dim] -> action [act_dim]``: deterministic, a fresh cone weight per call.

        The weights come from a generator of its own seeded with ``seed``: collecting data or drawing a
        diagnostic with this policy never advances the agent's training generator.
        """
        generator = torch.Generator(device=self.device).manual_seed(int(seed))

        def policy(obs: np.ndarray) -> np.ndarray:
            obs_t = torch.as_tensor(np.asarray(obs, dtype=np.float32), device=self.device).unsqueeze(0)
            return self.act(obs_t, self.sample_preferences(1, generator))[0].cpu().numpy()

        return policy

    # ---- Lightning hooks --------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        if self.env is None:
            self.env = self.env_factory()
            self.spec.check_env(self.env)
            low, high = self.env.action_space.low, self.env.action_space.high
            if not (np.allclose(low, -1.0) and np.allclose(high, 1.0)):
                raise ValueError(
                    f"CAPQLModule: expects actions in [-1, 1], {self.spec.id} has [{low}, {high}]"
                )

    def _ensure_buffer(self) -> None:
        """Preallocate the replay buffer on the module's device (once; again only if the device changed)."""
        if self.buffer is None or self.buffer.device != self.device:
            self.buffer = ReplayBuffer(
                self.config.buffer_size,
                self.spec.obs_dim,
                self.spec.act_dim,
                self.spec.n_objectives,
                self.device,
            )

    def on_fit_start(self) -> None:
        # After Lightning moved the module to its device, so the buffer is allocated there.
        self._ensure_buffer()
        if self._generator is None or self._generator.device != self.device:
            seed = self.config.seed
            if seed is None:
                seed = int(torch.randint(0, 2**62, ()).item())
            self._generator = torch.Generator(device=self.device).manual_seed(seed)
            self._seed = seed
        if self._obs is None:
            assert self.env is not None
            self._obs, _ = self.env.reset(seed=self._seed)
            self.env.action_space.seed(self._seed)
            self.shaper.reset()
        if self._weights_t is None or self._weights_t.device != self.device:
            self._weight_cursor = _WEIGHT_BLOCK  # draw fresh weights on this device (kept when resumed)
        # Hot path: the update calls backward() and the raw torch optimisers directly instead of
        # manual_backward / LightningOptimizer.step, whose strategy, precision and hook plumbing costs about
        # as much per update as the env step. That plumbing only matters for mixed precision or distributed
        # strategies, which this module does not support: check that here instead of silently ignoring them.
        if self._trainer is not None:
            trainer = self.trainer
            if trainer.world_size != 1 or str(trainer.precision) not in ("32-true", "32"):
                raise ValueError(
                    "CAPQLModule: runs on one device in 32-bit precision "
                    f"(got world_size={trainer.world_size}, precision={trainer.precision!r})"
                )
            self._raw_optimizers = [opt.optimizer for opt in self.optimizers()]
        self._polyak_targets = list(self.critic_target.parameters())
        self._polyak_sources = list(self.critic.parameters())
        self._train_sums = torch.zeros(len(_TRAIN_KEYS), device=self.device)
        self._updates_in_window = 0
        self._window_start = (time.perf_counter(), self._steps)

    def on_fit_end(self) -> None:
        self._flush_logs()

    def train_dataloader(self) -> DataLoader:
        # batch_size=None: no collation, the item is passed through as is.
        # Its own generator: creating the loader's iterator draws a base seed, which must not come from the
        # global RNG (a resumed run creates a new iterator and would otherwise shift the global stream).
        return DataLoader(_Forever(), batch_size=None, generator=torch.Generator().manual_seed(0))

    def configure_optimizers(self):
        return _adam(self.actor.parameters(), self.config.lr), _adam(self.critic.parameters(), self.config.lr)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        if self.target_reached:
            self.trainer.should_stop = True
            return -1  # skip the rest of the epoch; the fit loop then sees should_stop
        return None

    def training_step(self, batch: Any, batch_idx: int) -> None:
        self.env_step()
        if self._steps >= self.config.learning_starts and len(self.buffer) >= self.config.batch_size:
            self.update()
        if self._steps % self.config.log_every == 0:
            self._flush_logs()
        if self.target_reached:
            self.trainer.should_stop = True

    @property
    def target_reached(self) -> bool:
        return self.target_env_steps is not None and self._steps >= self.target_env_steps

    # ---- acting in the env ---------------------------------------------------------------------------
    def _next_weight(self) -> tuple[torch.Tensor, np.ndarray]:
        if self._weight_cursor >= _WEIGHT_BLOCK:
            self._weights_t = self.sample_preferences(_WEIGHT_BLOCK)
            self._weights_np = self._weights_t.cpu().numpy()
            self._weight_cursor = 0
        i = self._weight_cursor
        self._weight_cursor += 1
        return self._weights_t[i : i + 1], self._weights_np[i]

    @torch.no_grad()
    def env_step(self) -> None:
        """Take one env step with a fresh cone weight and push the result through the shaper into the buffer."""
        assert self.env is not None and self.buffer is not None and self._obs is not None
        weight_t, weight = self._next_weight()
        obs = self._obs
        if self._steps < self.config.learning_starts:
            action = self.env.action_space.sample().astype(np.float32)
        else:
            # Deterministic action: exploration comes from the per-step preference w (SPEC §6).
            obs_t = torch.as_tensor(obs, dtype=torch.float32, device=self.device).unsqueeze(0)
            action = torch.tanh(self.actor(obs_t, weight_t)[0])[0].cpu().numpy()
            if not np.isfinite(action).all():  # host-side numpy check: the action is on the host anyway
                bad = float(action[~np.isfinite(action)][0])
                raise self._root_cause(NonFiniteError("policy/action", bad, self._steps))
        next_obs, reward, terminated, truncated, info = self.env.step(action)
        released = bool(info["released"][self.sparse_channel]) if "released" in info else True
        try:
            transitions = self.shaper.push(
                obs, action, reward, next_obs, terminated, truncated, weight, released
            )
        except NonFiniteError as err:
            if err.env_step is None:
                err.env_step = self._steps + 1  # this step's reward: the clock reads _steps + 1 after it
            raise self._root_cause(err) from None
        for tr in transitions:
            # Transition.terminated is termination only: truncation keeps bootstrapping (see critic_target).
            self.buffer.add(tr.obs, tr.action, tr.reward, tr.next_obs, tr.terminated, tr.weight)

        self._episode_return += info.get("true_reward", reward)
        self._episode_length += 1
        self._steps += 1
        self.env_steps.fill_(self._steps)
        if terminated or truncated:
            # next_obs above is the true final observation of the episode (gymnasium returns it from step);
            # only now do we reset, so a truncated transition bootstraps from the right state.
            self._finished_returns.append(self._episode_return.copy())
            self._finished_lengths.append(self._episode_length)
            self._episode_return[:] = 0.0
            self._episode_length = 0
            self._obs, _ = self.env.reset()
        else:
            self._obs = next_obs

    # ---- checkpointing of the runtime state (everything that is not a parameter or buffer) -------------
    def runtime_state(self) -> dict[str, Any]:
        """Replay buffer, env state mid-episode, current observation, samplers and episode accumulators, as
        tensors and plain containers (loads with ``weights_only=True``)."""
        from prism.envs.state import get_env_state

        assert self.buffer is not None and self.env is not None and self._generator is not None
        buf = self.buffer
        filled = buf.capacity if buf.size == buf.capacity else buf.size
        return {
            # clone(): saving a view would save the whole preallocated storage.
            "buffer_rows": buf.storage[:filled].detach().cpu().clone(),
            "buffer_position": buf.position,
            "buffer_size": buf.size,
            "env": get_env_state(self.env),
            "obs": torch.as_tensor(np.asarray(self._obs, dtype=np.float32)),
            "seed": self._seed,
            "generator": self._generator.get_state(),
            "weights": None if self._weights_t is None else self._weights_t.detach().cpu(),
            "weight_cursor": self._weight_cursor,
            "episode_return": torch.from_numpy(self._episode_return.copy()),
            "episode_length": self._episode_length,
            "n_updates": self._n_updates,
        }

    def load_runtime_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`runtime_state` (called after ``setup`` built the env, before ``on_fit_start``)."""
        from prism.envs.state import set_env_state

        assert self.env is not None
        self._ensure_buffer()
        rows = state["buffer_rows"]
        self.buffer.storage[: rows.shape[0]] = rows.to(self.device)
        self.buffer.position, self.buffer.size = int(state["buffer_position"]), int(state["buffer_size"])
        self.env.reset(seed=int(state["seed"]))  # a reset first, so every wrapper is initialised
        set_env_state(self.env, state["env"])
        self._obs = state["obs"].numpy().copy()
        self._seed = int(state["seed"])
        self._generator = torch.Generator(device=self.device)
        self._generator.set_state(state["generator"])
        if state["weights"] is not None:
            self._weights_t = state["weights"].to(self.device)
            self._weights_np = self._weights_t.cpu().numpy()
        self._weight_cursor = int(state["weight_cursor"])
        self._episode_return = state["episode_return"].numpy().copy()
        self._episode_length = int(state["episode_length"])
        self._n_updates = int(state["n_updates"])

    # ---- learning -------------------------------------------------------------------------------------
    def update(self) -> None:
        """One CAPQL update: critic step, actor step (+ SymReg), Polyak step of the target critics."""
        cfg = self.config
        assert self.buffer is not None
        batch = self.buffer.sample(cfg.batch_size, generator=self._generator)
        if self.relabel_fn is not None:
            batch = self.relabel_fn(batch)
        actor_opt, critic_opt = self._raw_optimizers

        critic = capql_critic_loss(self.actor, self.critic, self.critic_target, batch, cfg.gamma, cfg.alpha)
        critic_opt.zero_grad(set_to_none=True)
        critic.loss.backward()
        critic_opt.step()

        actor = capql_actor_loss(
            self.actor,
            self.critic,
            batch,
            cfg.alpha,
            self.effective_symreg_lambda,
            self.obs_sign,
            self.act_sign,
        )
        actor_opt.zero_grad(set_to_none=True)
        actor.loss.backward()
        actor_opt.step()

        with torch.no_grad():
            # θ̄ ← θ̄ + τ(θ − θ̄), all target tensors in one fused call.
            torch._foreach_lerp_(self._polyak_targets, self._polyak_sources, cfg.tau)
            terms = torch.stack(
                [critic.loss.detach(), actor.policy_loss, actor.symreg, actor.alpha_log_pi, critic.q_mean]
            )
            self._train_sums.add_(terms)
        self._updates_in_window += 1
        self._n_updates += 1

    # ---- non-finite values ----------------------------------------------------------------------------
    def _non_finite_train_term(self) -> tuple[str, float] | None:
        """The first NaN/inf training term accumulated since the last flush (one host sync)."""
        if self._train_sums is None or self._updates_in_window == 0:
            return None
        return first_non_finite(zip(_TRAIN_KEYS, self._train_sums.tolist()))

    def _root_cause(self, err: NonFiniteError) -> NonFiniteError:
        """A NaN action or shaped reward usually comes from a loss that went NaN earlier in the window:
        name that loss instead when there is one (only on this error path, so no sync per step)."""
        bad = self._non_finite_train_term()
        return err if bad is None else NonFiniteError(*bad, env_step=self._steps)

    def check_finite(self) -> None:
        """Raise :class:`~prism.errors.NonFiniteError` if a training term of the current log window or a
        parameter is NaN/inf (one host sync: the checkpointer calls it before every save)."""
        bad = self._non_finite_train_term()
        if bad is None:
            params = list(self.named_parameters())
            finite = torch.stack([torch.isfinite(p).all() for _, p in params]).tolist() if params else []
            for (name, p), ok in zip(params, finite):
                if not ok:
                    bad = f"param/{name}", float(p.detach()[~torch.isfinite(p.detach())][0])
                    break
        if bad is not None:
            raise NonFiniteError(*bad, env_step=self._steps)

    # ---- logging ---------------------------------------------------------------------------------------
    def _flush_logs(self) -> None:
        """Write the window's averages against env steps (one host sync per ``log_every`` steps)."""
        if self._window_start is None:
            return
        metrics: dict[str, float] = {}
        if self._updates_in_window > 0 and self._train_sums is not None:
            means = (self._train_sums / self._updates_in_window).tolist()
            bad = first_non_finite(zip(_TRAIN_KEYS, means))
            if bad is not None:  # stop here: the last checkpoint on disk predates the bad update
                raise NonFiniteError(*bad, env_step=self._steps)
            metrics.update(zip(_TRAIN_KEYS, means))
            self._train_sums.zero_()
        if self._finished_returns:
            returns = np.mean(self._finished_returns, axis=0)
            for name, value in zip(self.spec.objective_names, returns):
                metrics[f"rollout/return_{name}"] = float(value)
            metrics["rollout/episode_length"] = float(np.mean(self._finished_lengths))
            metrics["rollout/episodes"] = float(len(self._finished_lengths))
            self._finished_returns.clear()
            self._finished_lengths.clear()
        start_time, start_steps = self._window_start
        now = time.perf_counter()
        elapsed = max(now - start_time, 1e-9)
        if self._steps > start_steps:
            metrics["time/env_steps_per_s"] = (self._steps - start_steps) / elapsed
            metrics["time/updates_per_s"] = self._updates_in_window / elapsed
        self._updates_in_window = 0
        self._window_start = (now, self._steps)
        if not metrics:
            return
        self.latest_metrics = metrics
        if self.logger is not None:
            self.logger.log_metrics(metrics, step=self._steps)


def _sync_env_steps(module: torch.nn.Module, incompatible_keys: Any) -> None:
    # Loading a checkpoint restores the env_steps buffer; bring the python mirror along.
    assert isinstance(module, CAPQLModule)
    module._steps = int(module.env_steps.item())


def _adam(params, lr: float) -> torch.optim.Adam:
    # The fused kernel (CPU and CUDA since torch 2.4) does a whole Adam step in one call; older torch
    # rejects fused=True on CPU, where the multi-tensor (foreach) path is the next best.
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(params, lr=lr, foreach=True)

"""Env stepping and transition storage for off-policy backbones, for a population of S members.

:class:`OffPolicyAgent` owns what every off-policy MORL backbone shares (SB3's ``OffPolicyAlgorithm``'s
part), so a backbone (:class:`prism.agents.capql.CAPQLModule`) brings only its networks, optimisers and update:

- S envs (one per member), stepped together each env step with **one** batched policy forward;
- per member: a reward shaper between env and replay, a replay ring, a training-preference stream, the
  episode bookkeeping and a TensorBoard logger;
- the one env-step clock (``env_steps`` buffer, mirrored in a host int so control flow never syncs);
- the Lightning plumbing: an infinite dummy loader paces training; each batch runs up to
  ``steps_per_batch`` (env step, update) iterations — fewer when a callback asked to see a step
  (:meth:`pause_at`) or the target is reached — so Lightning's per-batch cost is paid once per batch;
- runtime state for checkpoints (:meth:`OffPolicyAgent.runtime_state`); the logging window with its NaN/inf
  checks and critic-divergence watch (:class:`~prism.agents.log_window.LogWindowMixin`) and the step's
  host↔device traffic (:class:`~prism.agents.transfer.StepTransferMixin`) are ideas of their own.

Randomness, per member s with seed ``seeds[s]`` (streams from :func:`prism.core.seeding.derive_seed`): the env's
resets, the random actions before ``learning_starts``, the release draws of its sparse wrapper (built by the
env factory), its preference draws and its replay indices. The networks' initial weights come from the member's
own ``init`` stream too. Only the update's policy noise is drawn for all members at once (one generator seeded
from the whole population): it is the one thing that depends on the population's composition.

Data flow of one env step (all members)::

    w_s ~ cone(22.5°)  ->  a_s = uniform (before learning_starts) | tanh(μ_s(o_s, w_s))  ->  env_s.step(a_s)
      -> shapers[s].push(...) -> replay ring s (done = terminated)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import gymnasium as gym
import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from prism.agents.builders import MemberEnvFactory
from prism.agents.divergence import DivergenceWatch
from prism.agents.log_window import LogWindowMixin
from prism.agents.preferences import cone_weights
from prism.agents.transfer import StepTransferMixin
from prism.core.errors import NonFiniteError
from prism.core.seeding import derive_seed, population_seed
from prism.data.replay import ReplayBatch, ReplayBuffer
from prism.envs.spec import EnvSpec
from prism.envs.state import get_env_state, set_env_state
from prism.reward.shapers import PassThroughShaper, RewardShaper

_WEIGHT_BLOCK = 1024  # preference weights drawn per sampler call (one draw per env step, amortised)


class _Forever(IterableDataset):
    """Yields a dummy item forever: the loader only paces training steps, it never touches the env."""

    def __iter__(self) -> Iterator[int]:
        while True:
            yield 0


class OffPolicyAgent(LogWindowMixin, StepTransferMixin, L.LightningModule):
    """Base of off-policy population agents (see the module docstring). Subclasses implement
    ``configure_optimizers``, :meth:`act`, :meth:`act_member`, :meth:`policy_mean_member` and :meth:`update`,
    and name their logged training terms in ``train_keys``.

    Args:
        spec: the env's spec (sizes, objectives, reflection symmetry).
        env_factory: builds member s's training env; called in ``setup``, never in ``__init__``.
        seeds: one seed per member (S = ``len(seeds)``).
        shapers: one reward shaper per member (default pass-through). Settable.
        sparse_channel: channel whose ``info["released"]`` flag is passed to the shapers.
        learning_starts, batch_size, buffer_size, cone_half_angle_deg, log_every, steps_per_batch: see
            :class:`prism.agents.config.CAPQLConfig`.
        target_env_steps: stop once the clock reaches it (settable, e.g. by the loop between phases).
    """

    train_keys: tuple[str, ...] = ()

    def __init__(
        self,
        spec: EnvSpec,
        env_factory: MemberEnvFactory,
        seeds: Sequence[int] | None,
        *,
        shapers: Sequence[RewardShaper] | RewardShaper | None = None,
        sparse_channel: int | None = None,
        learning_starts: int = 1000,
        batch_size: int = 128,
        buffer_size: int = 1_000_000,
        cone_half_angle_deg: float = 22.5,
        log_every: int = 1000,
        steps_per_batch: int = 1,
        target_env_steps: int | None = None,
    ):
        super().__init__()
        self.automatic_optimization = False
        seeds = (0,) if seeds is None else seeds
        if shapers is not None and not isinstance(shapers, Sequence):
            shapers = [shapers]  # one shaper for a one-member agent
        if len(seeds) == 0 or len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds: need distinct member seeds, got {list(seeds)}")
        self.spec = spec
        self.env_factory = env_factory
        self.seeds = tuple(int(s) for s in seeds)
        self.shapers: list[RewardShaper] = (
            list(shapers) if shapers is not None else [PassThroughShaper() for _ in self.seeds]
        )
        if len(self.shapers) != self.members:
            raise ValueError(f"shapers: need one per member ({self.members}), got {len(self.shapers)}")
        self.sparse_channel = spec.sparse_channel if sparse_channel is None else sparse_channel
        self.learning_starts = learning_starts
        self.batch_size = batch_size
        self.buffer_size = buffer_size
        self.cone_half_angle = math.radians(cone_half_angle_deg)
        self.log_every = log_every
        self.steps_per_batch = max(1, steps_per_batch)
        self.target_env_steps = target_env_steps
        self.member_loggers: list[Any] | None = None
        """Per member, the logger of its ``train/``, ``rollout/``, ``time/`` scalars (None: the trainer's)."""
        self.divergence = DivergenceWatch(len(self.seeds))  # of train/critic (prism.agents.divergence)

        self.register_buffer("env_steps", torch.zeros((), dtype=torch.long))
        self._steps = 0  # python mirror of env_steps: control flow never reads the tensor
        self.register_load_state_dict_post_hook(_sync_env_steps)
        self._pauses: set[int] = set()

        # Runtime state (built in setup / on_fit_start, never pickled into hyperparameters).
        n_obj = spec.n_objectives
        self.envs: list[gym.Env] = []
        self.buffer: ReplayBuffer | None = None
        self._obs: np.ndarray | None = None  # [S, obs_dim]
        self._pref_generators: list[torch.Generator] = []
        self._replay_generators: list[torch.Generator] = []
        self._update_generator: torch.Generator | None = None
        self._weights_t: torch.Tensor | None = None  # [S, block, L]
        self._weights_np: np.ndarray | None = None
        self._weight_cursor = _WEIGHT_BLOCK
        self._episode_return = np.zeros((self.members, n_obj), dtype=np.float64)
        self._episode_length = np.zeros(self.members, dtype=np.int64)
        self._finished: list[list[tuple[np.ndarray, int]]] = [[] for _ in self.seeds]
        self._train_sums: torch.Tensor | None = None
        self._updates_in_window = 0
        self._window_start: tuple[float, int] | None = None
        self._n_updates = 0
        self.relabel_fn: Callable[[ReplayBatch], ReplayBatch] | None = None
        """Applied to every sampled replay batch ``[S, B, ...]`` before the update (settable; the loop sets it
        for ``reward.relabel``)."""

    # ---- the contract ---------------------------------------------------------------------------------
    @property
    def members(self) -> int:
        """S, the number of members."""
        return len(self.seeds)

    @property
    def env_step_count(self) -> int:
        """Env steps taken so far by each member (the ``env_steps`` buffer, read without a device sync)."""
        return self._steps

    @property
    def n_updates(self) -> int:
        """Gradient updates done so far in this process."""
        return self._n_updates

    @property
    def shaper(self) -> RewardShaper:
        """The shaper of a one-member agent (``shapers[0]``)."""
        return self.shapers[0]

    @shaper.setter
    def shaper(self, value: RewardShaper) -> None:
        self.shapers[0] = value

    def pause_at(self, env_step: int) -> None:
        if env_step > self._steps:
            self._pauses.add(int(env_step))

    def drop_captured_graphs(self) -> None:
        """Nothing is captured by default (CAPQL's static update captures a CUDA graph and overrides this)."""

    def sample_preferences(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``n`` training preferences ``[n, L]`` from the cone around the uniform weight (docs/method.md §6)."""
        return cone_weights(
            n,
            self.spec.n_objectives,
            half_angle=self.cone_half_angle,
            generator=generator,
            device=self.device,
        )

    def expert_policy(self, seed: int, member: int = 0) -> Callable[[np.ndarray], np.ndarray]:
        """A numpy policy of member ``member``: deterministic action, a fresh cone weight per call drawn from a
        generator of its own seeded with ``seed`` (collecting data never shifts the training draws)."""
        generator = torch.Generator(device=self.device).manual_seed(int(seed))

        def policy(obs: np.ndarray) -> np.ndarray:
            obs_t = torch.as_tensor(np.asarray(obs, dtype=np.float32), device=self.device).unsqueeze(0)
            weight = self.sample_preferences(1, generator)
            return self.act_member(member, obs_t, weight)[0].cpu().numpy()

        return policy

    # ---- for subclasses -------------------------------------------------------------------------------
    def act(self, obs: torch.Tensor, weight: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        raise NotImplementedError

    def act_member(self, member: int, obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def policy_mean_member(self, member: int, obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def update(self, batch: ReplayBatch) -> torch.Tensor:
        """One gradient update of every member on ``batch`` (fields ``[S, B, ...]``); returns the logged
        terms ``[S, len(train_keys)]`` (detached, on the device)."""
        raise NotImplementedError

    def member_generator(self, member: int, stream: str) -> torch.Generator:
        """A fresh generator on the agent's device for member ``member``'s ``stream``."""
        seed = derive_seed(self.seeds[member], stream)
        return torch.Generator(device=self.device).manual_seed(seed)

    def init_generators(self) -> list[torch.Generator]:
        """Per member, the CPU generator its networks' initial weights are drawn from."""
        return [torch.Generator().manual_seed(derive_seed(s, "init")) for s in self.seeds]

    # ---- Lightning hooks ------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        if not self.envs:
            self.envs = [self.env_factory(m) for m in range(self.members)]
            for env in self.envs:
                self.spec.check_env(env)
                low, high = env.action_space.low, env.action_space.high
                if not (np.allclose(low, -1.0) and np.allclose(high, 1.0)):
                    raise ValueError(
                        f"{type(self).__name__}: expects actions in [-1, 1], {self.spec.id} has [{low}, {high}]"
                    )

    def _ensure_buffer(self) -> None:
        """Preallocate the replay rings on the module's device (once; again only if the device changed)."""
        if self.buffer is None or self.buffer.device != self.device:
            self.buffer = ReplayBuffer(
                self.buffer_size,
                self.spec.obs_dim,
                self.spec.act_dim,
                self.spec.n_objectives,
                self.device,
                members=self.members,
            )

    def _ensure_generators(self) -> None:
        if not self._pref_generators or self._pref_generators[0].device != self.device:
            self._pref_generators = [self.member_generator(m, "preferences") for m in range(self.members)]
            self._replay_generators = [self.member_generator(m, "replay") for m in range(self.members)]
            self._update_generator = torch.Generator(device=self.device).manual_seed(
                population_seed(self.seeds, "update")
            )

    def on_fit_start(self) -> None:
        # After Lightning moved the module to its device, so the buffer is allocated there.
        self._ensure_buffer()
        self._ensure_generators()
        if self._obs is None:
            first = []
            for m, env in enumerate(self.envs):
                obs, _ = env.reset(seed=derive_seed(self.seeds[m], "env"))
                env.action_space.seed(derive_seed(self.seeds[m], "random_actions"))
                self.shapers[m].reset()
                first.append(obs)
            self._obs = np.asarray(first, dtype=np.float32)
        if self._weights_t is None or self._weights_t.device != self.device:
            self._weight_cursor = _WEIGHT_BLOCK  # draw fresh weights on this device (kept when resumed)
        # Hot path: the update calls backward() and the raw torch optimisers directly instead of
        # manual_backward / LightningOptimizer.step, whose strategy, precision and hook plumbing costs about
        # as much per update as the env step. That plumbing only matters for mixed precision or distributed
        # strategies, which these agents do not support: check that here instead of silently ignoring them.
        if self._trainer is not None:
            trainer = self.trainer
            if trainer.world_size != 1 or str(trainer.precision) not in ("32-true", "32"):
                raise ValueError(
                    f"{type(self).__name__}: runs on one device in 32-bit precision "
                    f"(got world_size={trainer.world_size}, precision={trainer.precision!r})"
                )
            self._raw_optimizers = [opt.optimizer for opt in self.optimizers()]
        self._start_log_window()  # (a resumed run goes on with the window its checkpoint held)
        self._window_start = (time.perf_counter(), self._steps)

    def on_fit_end(self) -> None:
        self._flush_logs()

    def train_dataloader(self) -> DataLoader:
        # batch_size=None: no collation, the item is passed through as is.
        # Its own generator: creating the loader's iterator draws a base seed, which must not come from the
        # global RNG (a resumed run creates a new iterator and would otherwise shift the global stream).
        return DataLoader(_Forever(), batch_size=None, generator=torch.Generator().manual_seed(0))

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        if self.target_reached:
            self.trainer.should_stop = True
            return -1  # skip the rest of the epoch; the fit loop then sees should_stop
        return None

    def training_step(self, batch: Any, batch_idx: int) -> None:
        # Up to steps_per_batch (env step, update) iterations: the same maths as one per batch, with
        # Lightning's per-batch cost paid once. A batch ends early at any step a callback asked to see.
        for _ in range(self.steps_per_batch):
            self.env_step()
            if self._steps >= self.learning_starts and len(self.buffer) >= self.batch_size:
                self._update_and_accumulate()
            if self._steps % self.log_every == 0:
                self._flush_logs()
            if self.target_reached:
                self.trainer.should_stop = True
                break
            if self._steps in self._pauses:
                self._pauses.discard(self._steps)
                break

    @property
    def target_reached(self) -> bool:
        return self.target_env_steps is not None and self._steps >= self.target_env_steps

    # ---- whole-run checkpoint state ------------------------------------------------------------------
    def runtime_state(self) -> dict[str, Any]:
        """The state a whole-run checkpoint needs beyond the networks: replay rings, envs mid-episode,
        observations, random streams, preference block and episode bookkeeping (tensors and plain containers)."""
        assert self.buffer is not None and self.envs and self._update_generator is not None
        return {
            "replay": self.buffer.state_dict(),
            "envs": [get_env_state(env) for env in self.envs],
            "obs": torch.as_tensor(self._obs),
            "preference_generators": [g.get_state() for g in self._pref_generators],
            "replay_generators": [g.get_state() for g in self._replay_generators],
            "update_generator": self._update_generator.get_state(),
            "weights": None if self._weights_t is None else self._weights_t.detach().cpu(),
            "weight_cursor": self._weight_cursor,
            "episode_return": torch.from_numpy(self._episode_return.copy()),
            "episode_length": torch.from_numpy(self._episode_length.copy()),
            "n_updates": self._n_updates,
            "divergence": self.divergence.state_dict(),
            # the open log window (its sums and update count), so a resumed run's window means are unchanged
            "log_window": None
            if self._train_sums is None
            else {"sums": self._train_sums.detach().cpu(), "updates": self._updates_in_window},
        }

    def load_runtime_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`runtime_state` saved (after ``setup``: the envs exist)."""
        assert self.envs
        self._ensure_buffer()
        self._ensure_generators()
        self.buffer.load_state_dict(state["replay"])
        for m, env in enumerate(self.envs):
            env.reset(
                seed=derive_seed(self.seeds[m], "env")
            )  # a reset first, so every wrapper is initialised
            set_env_state(env, state["envs"][m])
        self._obs = state["obs"].numpy().copy()
        for g, s in zip(self._pref_generators, state["preference_generators"]):
            g.set_state(s)
        for g, s in zip(self._replay_generators, state["replay_generators"]):
            g.set_state(s)
        self._update_generator.set_state(state["update_generator"])
        if state["weights"] is not None:
            self._weights_t = state["weights"].to(self.device)
            self._weights_np = self._weights_t.cpu().numpy()
        self._weight_cursor = int(state["weight_cursor"])
        self._episode_return = state["episode_return"].numpy().copy()
        self._episode_length = state["episode_length"].numpy().copy()
        self._n_updates = int(state["n_updates"])
        self.divergence.load_state_dict(state.get("divergence"))  # absent before the watch: starts afresh
        window = state.get("log_window")  # absent before: the resumed run opens a fresh window, as it did
        self._restored_log_window = None if window is None else (window["sums"], int(window["updates"]))

    # ---- acting in the envs ---------------------------------------------------------------------------
    def _next_weights(self) -> tuple[torch.Tensor, np.ndarray]:
        """This step's training preference of every member: ``[S, 1, L]`` (device) and ``[S, L]`` (numpy)."""
        if self._weight_cursor >= _WEIGHT_BLOCK:
            self._weights_t = torch.stack(
                [self.sample_preferences(_WEIGHT_BLOCK, g) for g in self._pref_generators]
            )
            self._weights_np = self._weights_t.cpu().numpy()
            self._weight_cursor = 0
        i = self._weight_cursor
        self._weight_cursor += 1
        return self._weights_t[:, i : i + 1], self._weights_np[:, i]

    @torch.no_grad()
    def env_step(self) -> None:
        """One env step of every member with a fresh cone weight each; results through the shapers into replay."""
        assert self.buffer is not None and self._obs is not None
        weight_t, weights = self._next_weights()
        obs = self._obs
        if self._steps < self.learning_starts:
            actions = np.stack([env.action_space.sample() for env in self.envs]).astype(np.float32)
        else:
            # Deterministic action: exploration comes from the per-step preference w (docs/method.md §6).
            actions = self.act(self._device_obs(obs), weight_t)[:, 0].cpu().numpy()  # the one copy out
            if not np.isfinite(actions).all():  # host-side numpy check: the actions are on the host anyway
                bad = float(actions[~np.isfinite(actions)][0])
                raise self._root_cause(NonFiniteError("policy/action", bad, self._steps))
        members, rows = [], []
        next_obs_all = np.empty_like(obs)
        for m, env in enumerate(self.envs):
            next_obs, reward, terminated, truncated, info = env.step(actions[m])
            released = bool(info["released"][self.sparse_channel]) if "released" in info else True
            try:
                pushed = self.shapers[m].push(
                    obs[m], actions[m], reward, next_obs, terminated, truncated, weights[m], released
                )
            except NonFiniteError as err:
                if err.env_step is None:
                    err.env_step = self._steps + 1  # this step's reward: the clock reads _steps + 1 after it
                raise self._root_cause(err) from None
            for tr in pushed:
                # Transition.terminated is termination only: truncation keeps bootstrapping (critic target).
                rows.append(
                    self.buffer.row(tr.obs, tr.action, tr.reward, tr.next_obs, tr.terminated, tr.weight)
                )
                members.append(m)
            self._episode_return[m] += info.get("true_reward", reward)
            self._episode_length[m] += 1
            if terminated or truncated:
                # next_obs above is the true final observation (gymnasium returns it from step); only now do
                # we reset, so a truncated transition bootstraps from the right state.
                self._finished[m].append((self._episode_return[m].copy(), int(self._episode_length[m])))
                self._episode_return[m] = 0.0
                self._episode_length[m] = 0
                next_obs, _ = env.reset()
            next_obs_all[m] = next_obs
        self._store_step(members, rows, next_obs_all)  # rows and next observations: the one copy in
        self._obs = next_obs_all
        self._steps += 1
        self.env_steps.fill_(self._steps)

    # ---- learning -------------------------------------------------------------------------------------
    def sample_batch(self) -> ReplayBatch:
        """A replay batch ``[S, B, ...]`` (member s's indices from its own stream), relabelled if asked."""
        assert self.buffer is not None
        batch = self.buffer.sample_members(self.batch_size, self._replay_generators)
        return batch if self.relabel_fn is None else self.relabel_fn(batch)


def _sync_env_steps(module: torch.nn.Module, incompatible_keys: Any) -> None:
    # Loading a checkpoint restores the env_steps buffer; bring the python mirror along.
    assert isinstance(module, OffPolicyAgent)
    module._steps = int(module.env_steps.item())

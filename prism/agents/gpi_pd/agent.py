"""GPI-PD as an off-policy prism backbone (one member, S = 1): TD3-style vector critics, PER and GPI-LS.

What follows morl-baselines' ``GPIPDContinuousAction`` (see the sibling modules for the equations):

- acting: ``clamp(tanh μ(s, w) + clip(N(0, 0.2²), ±0.5), −1, 1)`` during training (uniform random before
  ``learning_starts``); ``tanh μ(s, w)`` when evaluating (``act``/``act_member``);
- training weight: GPI-LS picks the iteration's weight w every ``timesteps_per_iter`` env steps; the iteration's
  weight set M = CCS weight support + top-``corner_weights_top_k`` corners + {w}, without repeats; at every
  episode end the acting weight is redrawn uniformly from M;
- each env step (from ``learning_starts``) runs ``gradient_updates`` updates; each draws a PER batch and, when
  M holds more than one weight, doubles it: rows with the acting weight, then the same rows with weights drawn
  uniformly from M (morl-baselines' ``weight_support`` during ``train_iteration``); priorities come from the
  first half; the policy and its target move every ``policy_delay``-th update, the target critics every update.
- after an iteration, every weight of M is evaluated with the plain policy (``eval_episodes_per_weight``
  episodes, discounted true return) and added to the CCS; GPI-LS priorities of the next corners use the GPI
  policy over the CCS weight support {w_i}: every candidate action ``a_j = tanh μ(s, w_j)`` is scored under
  every ``Q_1(·, ·, w_i)`` and the pair maximising ``w·Q_1(s, a_j, w_i)`` gives the action (critic in eval
  mode, i.e. no dropout; morl-baselines leaves it in training mode).

Dyna (``config.dyna``, morl-baselines' semantics; the model is :class:`~prism.agents.gpi_pd.dynamics.ProbabilisticEnsemble`
with ``dynamics_net_arch``, 5 members, 2 elites):

- from ``learning_starts``, every ``dynamics_train_freq`` env steps the model is fitted (warm start) on the whole
  real replay, rewards as stored there (after the shaper; see dynamics.py on the sparse channel);
- from ``dynamics_rollout_starts`` (and once a fit happened), every ``dynamics_rollout_freq`` env steps the model
  rolls out ``dynamics_rollout_len`` steps from ``dynamics_rollout_batch_size`` real start states drawn with
  replacement (PER-sampled when ``per``, uniform otherwise; chunks of ≤ 10 000) under the *exploring*
  policy ``clamp(tanh μ(s, w) + clip(N(0, policy_noise²), ±noise_clip), −1, 1)`` at the current acting weight
  w; transitions with uncertainty ≥ ``dynamics_min_uncertainty`` are dropped, the rest go to a model buffer (a
  :class:`~prism.data.replay.ReplayBuffer` of ``dynamics_buffer_size`` rows, FIFO);
- once the model buffer holds anything, each update's batch is ``int(batch_size·dynamics_real_ratio)`` real
  rows (PER-sampled) followed by the rest drawn uniformly from the model buffer (then doubled with support
  weights as above). Only the real rows get new PER priorities; model rows have no priority, and no row gets
  an importance weight (``per_beta`` is not applied, as in morl-baselines). ``relabel_fn`` relabels every row,
  real or imagined, so the Q-learner sees one reward definition.
- ``dyna/`` scalars every ``log_every`` steps: ``model_holdout_mse`` (mean over members, last fit),
  ``fit_epochs``, ``rollout_kept`` and ``rollout_dropped_frac`` (summed over the window's rollouts; the
  fraction proposed but over the uncertainty threshold), ``model_buffer_size``.
- randomness: the model's initial weights from the member's ``dynamics_init`` stream, fits and rollouts (start
  states, elite choice, Gaussian samples, the policy noise) from its ``dyna`` stream, model-buffer indices from
  its ``model_replay`` stream, so ``dyna: false`` draws exactly what it drew before.

Checkpoints: ``runtime_state`` adds the PER priorities, GPI-LS state, eval env and Dyna state to the base's (see
:mod:`prism.agents.gpi_pd.runtime_state`), so a resumed run is bit-exact; S > 1 is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

import numpy as np
import torch

from prism.agents.builders import adam
from prism.agents.gpi_pd.config import GPIPDConfig
from prism.agents.gpi_pd.dyna import DynaMixin
from prism.agents.gpi_pd.dynamics import ProbabilisticEnsemble
from prism.agents.gpi_pd.losses import gpi_pd_actor_loss, gpi_pd_critic_loss, td_priority
from prism.agents.gpi_pd.networks import DeterministicActor, VectorCritics
from prism.agents.gpi_pd.per import PrioritySampler
from prism.agents.gpi_pd.runtime_state import GPIPDRuntimeStateMixin
from prism.agents.gpi_pd.weight_support import GPILinearSupport, unique_rows
from prism.agents.off_policy import MemberEnvFactory, OffPolicyAgent
from prism.agents.symmetry import check_symmetry_table, reflection_from_spec
from prism.agents.symmetry import symreg_lambda as resolve_symreg_lambda
from prism.core.seeding import derive_seed
from prism.data.replay import ReplayBatch, ReplayBuffer
from prism.envs.spec import EnvSpec
from prism.reward.shapers import RewardShaper

TRAIN_KEYS = ("train/critic", "train/actor", "train/symreg", "train/q_mean", "train/priority")
"""Start states per model-rollout call (morl-baselines' chunk size; bounds the rollout's memory)."""


class GPIPDAgent(GPIPDRuntimeStateMixin, DynaMixin, OffPolicyAgent):
    """GPI-PD (GPI-LS weights, PER and, with ``config.dyna``, Dyna; see the module docstring) for one member."""

    config_class = GPIPDConfig
    train_keys = TRAIN_KEYS

    def __init__(
        self,
        config: GPIPDConfig,
        spec: EnvSpec,
        env_factory: MemberEnvFactory,
        shapers: Sequence[RewardShaper] | RewardShaper | None = None,
        *,
        seeds: Sequence[int] | None = None,
        symreg_lambda: float | None = None,
        sparse_channel: int | None = None,
        target_env_steps: int | None = None,
    ):
        config.validate()
        if seeds is not None and len(seeds) != 1:
            raise ValueError(f"seeds: GPI-PD supports one member only, got {len(seeds)} seeds")
        super().__init__(
            spec,
            env_factory,
            seeds,
            shapers=shapers,
            sparse_channel=sparse_channel,
            learning_starts=config.learning_starts,
            batch_size=config.batch_size,
            buffer_size=config.buffer_size,
            log_every=config.log_every,
            steps_per_batch=config.steps_per_batch,
            target_env_steps=target_env_steps,
        )
        self.config = config
        # A config from load_config holds the resolved float; one built in Python may leave it null.
        self.symreg_lambda = (
            float(symreg_lambda)
            if symreg_lambda is not None
            else resolve_symreg_lambda(config.symreg_lambda, spec)
        )
        check_symmetry_table(spec, self.symreg_lambda)
        self.save_hyperparameters({"agent": asdict(config), "env_id": spec.id, "seeds": list(self.seeds)})
        reflection = reflection_from_spec(spec) if spec.has_symmetry else None
        self.register_buffer("obs_sign", reflection.obs_sign if reflection else None, persistent=False)
        self.register_buffer("act_sign", reflection.act_sign if reflection else None, persistent=False)

        n_obj, hidden = spec.n_objectives, config.net_arch
        init = self.init_generators()
        self.actor = DeterministicActor(spec.obs_dim, n_obj, spec.act_dim, hidden, generators=init)
        self.actor_target = DeterministicActor(spec.obs_dim, n_obj, spec.act_dim, hidden)
        self.actor_target.load_state_dict(self.actor.state_dict())
        critic_in = spec.obs_dim + spec.act_dim + n_obj
        kw = dict(n=config.n_critics, dropout=config.critic_dropout, layer_norm=config.critic_layer_norm)
        self.critic = VectorCritics(critic_in, n_obj, hidden, generators=init, **kw)
        self.critic_target = VectorCritics(critic_in, n_obj, hidden, **kw)
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.actor_target.requires_grad_(False)
        self.critic_target.requires_grad_(False)

        self._eval_env = None
        self.per: PrioritySampler | None = None
        # Named streams of the run seed (prism.core.seeding), so GPI-LS's tie-breaking, the training preferences
        # and the GPI-LS eval env never replay another consumer's draws (or another seed's).
        self.linear_support = GPILinearSupport(
            n_obj, rng=np.random.default_rng(derive_seed(self.seeds[0], "gpi_pd/linear_support"))
        )
        self._weight_rng = np.random.default_rng(derive_seed(self.seeds[0], "gpi_pd/weights"))
        self._weight = self.linear_support.next_weight(self._evaluate_gpi)  # e_1 first (priority ∞)
        self._support_t: torch.Tensor | None = None  # the CCS weight support, for GPI
        self._set_iteration_weights(
            self.linear_support.iteration_weights(self._weight, config.corner_weights_top_k)
        )
        self._exploring = False

        # Dyna (None when config.dyna is false). The model is a submodule: it moves with the agent's device and
        # its weights are checkpointed; its own init stream keeps the actor/critic draws as without Dyna.
        self.dynamics: ProbabilisticEnsemble | None = None
        if config.dyna:
            self.dynamics = ProbabilisticEnsemble(
                spec.obs_dim,
                spec.act_dim,
                n_obj,
                hidden=config.dynamics_net_arch,
                generator=torch.Generator().manual_seed(derive_seed(self.seeds[0], "dynamics_init")),
            )
        self.model_buffer: ReplayBuffer | None = None
        self._dyna_generator: torch.Generator | None = None
        self._model_replay_generator: torch.Generator | None = None
        self._dynamics_fitted = False
        self._n_real = config.batch_size  # real rows at the head of the last sampled batch
        self._dyna_window: dict[str, float] = {}
        self._last_actor: torch.Tensor | None = None  # last actor terms, logged between policy updates

    # ---- acting ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: torch.Tensor, weight: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """``tanh μ(s, w)``; while the agent steps its training env, plus clipped Gaussian exploration noise."""
        action = torch.tanh(self.actor(obs, weight))
        if self._exploring or not deterministic:
            noise = torch.randn(action.shape, generator=self._update_generator, device=action.device)
            noise = (noise * self.config.policy_noise).clamp(-self.config.noise_clip, self.config.noise_clip)
            action = (action + noise).clamp(-1.0, 1.0)
        return action

    @torch.no_grad()
    def act_member(self, member: int, obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.actor(obs, weight, member=member))

    def policy_mean_member(self, member: int, obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return self.actor(obs, weight, member=member)

    def policy_mean(self, obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return self.actor(obs, weight)

    def sample_preferences(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """The current acting weight, ``n`` times (GPI-PD trains on GPI-LS weights, not a cone)."""
        return torch.as_tensor(self._weight, dtype=torch.float32, device=self.device).expand(n, -1).clone()

    def _next_weights(self) -> tuple[torch.Tensor, np.ndarray]:
        w = np.asarray(self._weight, dtype=np.float32)[None]
        return torch.as_tensor(w, device=self.device).unsqueeze(1), w

    def env_step(self) -> None:
        if self.per is None:
            self.per = PrioritySampler(self.buffer_size, device=self.device)
        before = int(self.buffer.positions[0])
        self._exploring = True
        try:
            super().env_step()
        finally:
            self._exploring = False
        added = (int(self.buffer.positions[0]) - before) % self.buffer_size
        self.per.on_add(0, (before + np.arange(added)) % self.buffer_size)
        if self._episode_length[0] == 0:  # an episode ended: redraw the acting weight from M
            self._weight = self._iteration_weights[self._weight_rng.integers(len(self._iteration_weights))]
        if self.dynamics is not None and self._steps >= self.learning_starts:
            self._dyna_step()
        if self._steps % self.config.timesteps_per_iter == 0:
            self._gpi_ls_iteration()

    # ---- GPI-LS ---------------------------------------------------------------------------------------
    def _gpi_ls_iteration(self) -> None:
        for m in self._iteration_weights:
            self.linear_support.add_solution(self._evaluate(m, gpi=False), m)
        self._weight = self.linear_support.next_weight(self._evaluate_gpi)
        if self._weight is None:  # no corner left: keep training on the support
            self._weight = self.linear_support.support[0]
        self._set_iteration_weights(
            self.linear_support.iteration_weights(self._weight, self.config.corner_weights_top_k)
        )
        support = unique_rows(np.stack(self.linear_support.support))
        self._support_t = torch.as_tensor(support, dtype=torch.float32, device=self.device)

    def _set_iteration_weights(self, weights: list[np.ndarray]) -> None:
        """M without repeats (as a list for the episode-end redraw and a tensor for batch doubling)."""
        unique = unique_rows(np.stack(weights))
        self._iteration_weights = [row.copy() for row in unique]
        self._iteration_weights_t = torch.as_tensor(unique, dtype=torch.float32, device=self.device)

    def _evaluate_gpi(self, w: np.ndarray) -> np.ndarray:
        return self._evaluate(w, gpi=True)

    @torch.no_grad()
    def gpi_action(self, obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """GPI over the CCS weight support {w_i} for ``obs [1, d]``: the candidate ``a_j = tanh μ(s, w_j)`` of
        ``argmax_{i, j} w·Q_1(s, a_j, w_i)`` (every policy's action scored by every policy's critic)."""
        support = self._support_t
        if support is None or len(support) < 2:
            return torch.tanh(self.actor(obs, weight))
        k = len(support)
        actions = torch.tanh(self.actor(obs.expand(k, -1), support))  # [k (j), act_dim]
        pairs = torch.cat(  # row i·k + j: state, action a_j, critic weight w_i
            [obs.expand(k * k, -1), actions.repeat(k, 1), support.repeat_interleave(k, dim=0)], dim=-1
        )
        was_training = self.critic.training
        self.critic.eval()
        q = self.critic(pairs)[0]  # the first critic, [k·k, L]
        self.critic.train(was_training)
        best = int((q @ weight[0]).argmax())
        return actions[best % k].unsqueeze(0)

    @property
    def gpi_eval_seed(self) -> int:
        """The first reset's seed of GPI-LS's eval env (its start states), a named stream of the run seed."""
        return derive_seed(self.seeds[0], "gpi_pd/gpi_eval")

    def _evaluate(self, w: np.ndarray, gpi: bool) -> np.ndarray:
        """Mean discounted true return of the (GPI) policy at ``w`` over a few episodes of an eval env."""
        if self._eval_env is None:
            self._eval_env = self.env_factory(0)
            self._eval_env.reset(seed=self.gpi_eval_seed)
        weight = torch.as_tensor(np.asarray(w, dtype=np.float32), device=self.device).unsqueeze(0)
        returns = []
        for _ in range(self.config.eval_episodes_per_weight):
            obs, _ = self._eval_env.reset()
            total, discount, done = np.zeros(self.spec.n_objectives), 1.0, False
            while not done:
                obs_t = torch.as_tensor(np.asarray(obs, dtype=np.float32), device=self.device).unsqueeze(0)
                action = self.gpi_action(obs_t, weight) if gpi else self.act_member(0, obs_t, weight)
                obs, reward, terminated, truncated, info = self._eval_env.step(action[0].cpu().numpy())
                total += discount * np.asarray(info.get("true_reward", reward), dtype=np.float64)
                discount *= self.config.gamma
                done = terminated or truncated
            returns.append(total)
        return np.mean(returns, axis=0)

    # ---- learning -------------------------------------------------------------------------------------
    def configure_optimizers(self):
        return adam(self.actor.parameters(), self.config.lr), adam(self.critic.parameters(), self.config.lr)

    def on_fit_start(self) -> None:
        super().on_fit_start()
        self._critic_polyak = (list(self.critic_target.parameters()), list(self.critic.parameters()))
        self._actor_polyak = (list(self.actor_target.parameters()), list(self.actor.parameters()))
        if self._last_actor is None:  # kept when resumed (load_runtime_state)
            self._last_actor = torch.zeros(3, device=self.device)

    def _update_and_accumulate(self) -> None:
        # GPI-PD's UTD ratio: several updates per env step, each on its own PER batch.
        for _ in range(self.config.gradient_updates):
            super()._update_and_accumulate()

    def sample_batch(self) -> ReplayBatch:
        """A PER batch with the training weights in ``weight`` (doubled with support weights, see above); with
        Dyna and a non-empty model buffer, its first ``int(batch_size·dynamics_real_ratio)`` rows are real and
        the rest are drawn uniformly from the model buffer."""
        assert self.buffer is not None and self.per is not None
        cfg = self.config
        mixed = self.model_buffer is not None and len(self.model_buffer) > 0
        self._n_real = int(self.batch_size * cfg.dynamics_real_ratio) if mixed else self.batch_size
        if cfg.per:
            self._index = self.per.sample(self._n_real, self._replay_generators)
        else:
            self._index = torch.randint(
                int(self.buffer.sizes[0]),
                (1, self._n_real),
                generator=self._replay_generators[0],
                device=self.device,
            )
        batch = self.buffer._split(self.buffer.storage[0, self._index[0]])
        if mixed:
            model = self.model_buffer.sample(self.batch_size - self._n_real, self._model_replay_generator)
            batch = ReplayBatch(*(torch.cat([real, imagined]) for real, imagined in zip(batch, model)))
        if self.relabel_fn is not None:
            batch = ReplayBatch(*(f[None] for f in batch))
            batch = ReplayBatch(*(f[0] for f in self.relabel_fn(batch)))
        w = torch.as_tensor(np.asarray(self._weight, dtype=np.float32), device=self.device).expand(
            self.batch_size, -1
        )
        mix = self._iteration_weights_t
        if len(mix) > 1:
            pick = torch.randint(
                len(mix), (self.batch_size,), generator=self._replay_generators[0], device=self.device
            )
            batch = ReplayBatch(*(torch.cat([f, f]) for f in batch[:5]), torch.cat([w, mix[pick]]))
        else:
            batch = batch._replace(weight=w)
        return batch

    def update(self, batch: ReplayBatch) -> torch.Tensor:
        cfg = self.config
        actor_opt, critic_opt = self._raw_optimizers
        critic = gpi_pd_critic_loss(
            self.actor_target,
            self.critic,
            self.critic_target,
            batch,
            cfg.gamma,
            cfg.policy_noise,
            cfg.noise_clip,
            self._update_generator,
        )
        critic_opt.zero_grad(set_to_none=True)
        critic.loss.backward()
        critic_opt.step()
        # Priorities of the real rows only (the head of the first half): model rows have no PER slot.
        b = self._n_real if self._n_real > 0 else self.batch_size
        priority = td_priority(critic.td_error[:b], batch.weight[:b], cfg.per_min_priority, cfg.per_alpha)
        if cfg.per and self._n_real > 0:
            self.per.update(self._index, priority.unsqueeze(0))
        with torch.no_grad():
            torch._foreach_lerp_(*self._critic_polyak, cfg.tau)
        if self._n_updates % cfg.policy_delay == 0:
            actor = gpi_pd_actor_loss(
                self.actor,
                self.critic,
                batch,
                self.symreg_lambda,
                self.obs_sign,
                self.act_sign,
                self._update_generator,
            )
            actor_opt.zero_grad(set_to_none=True)
            actor.loss.backward()
            actor_opt.step()
            with torch.no_grad():
                torch._foreach_lerp_(*self._actor_polyak, cfg.tau)
            self._last_actor = torch.stack([actor.policy_loss, actor.symreg, actor.policy_loss * 0]).detach()
        terms = [critic.member_loss, self._last_actor[0], self._last_actor[1], critic.q_mean, priority.mean()]
        return torch.stack(terms).reshape(1, -1)

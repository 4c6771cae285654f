"""CAPQL (Lu, Herman & Yu, ICLR 2023) with SymReg (docs/method.md §6, §7), for a population of S members.

:class:`CAPQLModule` brings only CAPQL's maths to :class:`~prism.agents.off_policy.OffPolicyAgent` (which steps
the envs, stores transitions, draws preferences and keeps the clock): a weight-conditioned tanh-Gaussian actor,
two vector critics with Polyak targets, and :func:`capql_update` — one update of every member as a function of
a replay batch ``[S, B, ...]``. Each member's parameters are slices of stacked tensors; the losses are summed
over members, so member s's gradient, and (Adam being element-wise) its optimiser step, are exactly its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import NamedTuple

import torch

from prism.agents.builders import adam
from prism.agents.config import CAPQLConfig
from prism.agents.losses import capql_actor_loss, capql_critic_loss
from prism.agents.networks import GaussianActor, VectorCriticEnsemble, sample_tanh_gaussian
from prism.agents.off_policy import MemberEnvFactory, OffPolicyAgent
from prism.agents.static_update import StaticReplayDraw, StaticUpdate
from prism.agents.symmetry import OrbitAveragedActor, check_symmetry_table, reflection_from_spec
from prism.agents.symmetry import symreg_lambda as resolve_symreg_lambda
from prism.data.replay import ReplayBatch
from prism.envs.spec import EnvSpec
from prism.reward.shapers import RewardShaper

TRAIN_KEYS = ("train/critic", "train/actor", "train/symreg", "train/alpha_log_pi", "train/q_mean")


class CAPQLNets(NamedTuple):
    actor: torch.nn.Module
    critic: VectorCriticEnsemble
    critic_target: VectorCriticEnsemble


class CAPQLHyper(NamedTuple):
    gamma: float
    alpha: float
    tau: float
    symreg_lambda: float  # the effective λ (0 when SymReg is off)
    log_prob_form: str = "exact"  # agent.tanh_log_prob


def capql_update(
    nets: CAPQLNets,
    optimizers: tuple[torch.optim.Optimizer, torch.optim.Optimizer],
    batch: ReplayBatch,
    hyper: CAPQLHyper,
    obs_sign: torch.Tensor,
    act_sign: torch.Tensor,
    generator: torch.Generator | None,
    polyak: tuple[list[torch.Tensor], list[torch.Tensor]],
) -> torch.Tensor:
    """One CAPQL update of every member: critic step, actor step (+ λ·SymReg), Polyak step of the targets.

    ``batch`` fields are ``[S, B, ...]``; ``generator`` draws the policy noise of the critic target and of the
    actor loss. Returns the logged terms ``[S, 5]`` in :data:`TRAIN_KEYS` order (detached).
    """
    actor_opt, critic_opt = optimizers
    critic = capql_critic_loss(
        nets.actor, nets.critic, nets.critic_target, batch, hyper.gamma, hyper.alpha, generator,
        hyper.log_prob_form,
    )  # fmt: skip
    critic_opt.zero_grad(set_to_none=True)
    critic.loss.backward()
    critic_opt.step()

    actor = capql_actor_loss(
        nets.actor, nets.critic, batch, hyper.alpha, hyper.symreg_lambda, obs_sign, act_sign, generator,
        hyper.log_prob_form,
    )  # fmt: skip
    actor_opt.zero_grad(set_to_none=True)
    actor.loss.backward()
    actor_opt.step()

    with torch.no_grad():
        # θ̄ ← θ̄ + τ(θ − θ̄), every target tensor in one fused call (element-wise: per member exact).
        targets, sources = polyak
        torch._foreach_lerp_(targets, sources, hyper.tau)
        return torch.stack(
            [critic.member_loss, actor.policy_loss, actor.symreg, actor.alpha_log_pi, critic.q_mean], dim=-1
        )


class CAPQLModule(OffPolicyAgent):
    """CAPQL with a weight-conditioned tanh-Gaussian actor, two vector critics and optional SymReg.

    Args:
        config: CAPQL's hyperparameters (``agent.*``).
        spec: the env's spec (sizes, objectives, reflection symmetry, default λ and sparse channel).
        env_factory: ``env_factory(member) -> env`` builds member s's training env (a zero-argument factory is
            accepted for a single member); called in ``setup``.
        shapers: one reward shaper per member (or a single shaper for one member); default pass-through.
        seeds: the members' seeds (default ``(0,)``: a single run); a run passes its ``seed`` / ``seeds``.
        symreg_lambda: overrides ``config.symreg_lambda`` (null there: the spec's λ, see
            :func:`~prism.agents.symmetry.symreg_lambda`).
        sparse_channel: channel whose ``info["released"]`` flag is passed to the shapers (default the spec's).
        target_env_steps: stop training once the clock reaches it (settable).
    """

    train_keys = TRAIN_KEYS
    config_class = CAPQLConfig
    """The dataclass of this backbone's ``agent.*`` keys (read for a class-path ``agent.name``, e.g. a
    subclass of this module; the registered ``capql`` names it in :mod:`prism.plugins`)."""

    def __init__(
        self,
        config: CAPQLConfig,
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
        super().__init__(
            spec,
            env_factory,
            seeds,
            shapers=shapers,
            sparse_channel=sparse_channel,
            target_env_steps=target_env_steps,
            **config.off_policy_kwargs(),
        )
        self.config = config
        self._static: StaticUpdate | None = None  # built on the first update (see _static_update)
        self._static_key: tuple | None = None
        # A config from load_config holds the resolved float; one built in Python may leave it null.
        self.symreg_lambda = (
            float(symreg_lambda)
            if symreg_lambda is not None
            else resolve_symreg_lambda(config.symreg_lambda, spec)
        )
        # 'exact' makes L_eq identically 0 and 'none' switches symmetry off: either way no SymReg term.
        effective = self.symreg_lambda if config.symmetry_mode == "regularise" else 0.0
        self.hyper = CAPQLHyper(config.gamma, config.alpha, config.tau, effective, config.tanh_log_prob)
        self.save_hyperparameters(
            {
                "agent": asdict(config),
                "env_id": spec.id,
                "seeds": list(self.seeds),
                "symreg_lambda": self.symreg_lambda,
                "sparse_channel": self.sparse_channel,
            }
        )

        n_obj, members = spec.n_objectives, self.members
        check_symmetry_table(spec, self.symreg_lambda, config.symmetry_mode)
        # Without a symmetry table there are no (L_g, K_g) at all (never an identity stand-in): the buffers
        # stay None and the SymReg branch, whose λ is 0 then, never reads them.
        reflection = reflection_from_spec(spec) if spec.has_symmetry else None
        self.register_buffer("obs_sign", reflection.obs_sign if reflection else None, persistent=False)
        self.register_buffer("act_sign", reflection.act_sign if reflection else None, persistent=False)
        init = self.init_generators()
        base_actor = GaussianActor(
            spec.obs_dim, n_obj, spec.act_dim, config.actor_hidden, members=members, generators=init
        )
        self.actor: torch.nn.Module = (
            OrbitAveragedActor(base_actor, reflection.obs_sign, reflection.act_sign)
            if config.symmetry_mode == "exact" and reflection is not None
            else base_actor
        )
        critic_in = spec.obs_dim + spec.act_dim + n_obj
        norm = config.critic_layer_norm
        self.critic = VectorCriticEnsemble(
            critic_in, n_obj, config.critic_hidden, config.n_critics, members, init, layer_norm=norm
        )
        self.critic_target = VectorCriticEnsemble(
            critic_in, n_obj, config.critic_hidden, config.n_critics, members, layer_norm=norm
        )
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.critic_target.requires_grad_(False)

    @property
    def effective_symreg_lambda(self) -> float:
        """The λ actually applied (0 unless ``symmetry_mode == "regularise"``)."""
        return self.hyper.symreg_lambda

    @property
    def nets(self) -> CAPQLNets:
        return CAPQLNets(self.actor, self.critic, self.critic_target)

    # ---- acting ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: torch.Tensor, weight: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """Actions ``[S, B, act_dim]`` in ``[−1, 1]`` for ``obs [S, B, obs_dim]``, ``weight [S, B, L]`` (for one
        member also ``[B, ·]`` -> ``[B, act_dim]``). ``deterministic`` gives ``tanh(μ(s, w))``; otherwise a
        sample from the tanh-Gaussian (global RNG)."""
        mean, log_std = self.actor(obs, weight)
        if deterministic:
            return torch.tanh(mean)
        return sample_tanh_gaussian(mean, log_std)[0]

    @torch.no_grad()
    def act_member(self, member: int, obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.actor(obs, weight, member=member)[0])

    def policy_mean_member(self, member: int, obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return self.actor(obs, weight, member=member)[0]

    def policy_mean(self, obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Pre-tanh mean μ(s, w) of the acting policy (orbit-averaged in ``exact`` mode), shaped like ``act``."""
        return self.actor(obs, weight)[0]

    # ---- learning -------------------------------------------------------------------------------------
    def configure_optimizers(self):
        # Capturable on CUDA when the update is graphed (the fused kernel's maths is the same either way; only
        # a capturable optimiser may be captured). Never on the CPU, where the optimiser stays as it was.
        capturable = self.config.graph_on(self.device)
        return (
            adam(self.actor.parameters(), self.config.lr, capturable=capturable),
            adam(self.critic.parameters(), self.config.lr, capturable=capturable),
        )

    def on_fit_start(self) -> None:
        super().on_fit_start()
        self._polyak = (list(self.critic_target.parameters()), list(self.critic.parameters()))
        self.drop_captured_graphs()  # the optimisers / buffer may be new: build (and capture) again

    def drop_captured_graphs(self) -> None:
        """Forget the static update and its CUDA graph: the next update builds them again (warm-up, capture).

        Needed whenever memory a captured graph points at may have been freed behind its back. The PRISM loop
        calls it after every reward fit: that fit runs a Lightning Trainer of its own, whose CUDA accelerator
        frees cuBLAS's workspaces and empties the allocator cache at setup and teardown. A graph captured
        before the fit crashed at its next replay on an H200 (illegal memory access); that its matmuls
        point at the freed workspace is read from the code, not measured."""
        self._static = None

    def update_step(self) -> torch.Tensor:
        """One update of every member through :class:`~prism.agents.static_update.StaticUpdate`: the replay
        draw into static buffers, then the body, eager or replayed from a CUDA graph (``agent.cuda_graph``)."""
        return self.static_update()(self._replay_generators, self.relabel_fn)

    def static_update(self) -> StaticUpdate:
        """The static-buffer update of the current buffer, generators and optimisers: rebuilt when any of them
        is replaced, and dropped when an optimiser loads a state (that replaces its state tensors, which a
        captured graph points at)."""
        assert self.buffer is not None and self._update_generator is not None
        key = (self.buffer, self._update_generator, *self._raw_optimizers)
        runner = self._static
        if runner is None or self._static_key != key:
            runner = StaticUpdate(
                StaticReplayDraw(self.buffer, self.batch_size),
                self.update,
                len(self.train_keys),
                cuda_graph=self.config.graph_on(self.buffer.device),
                graph_generators=[self._update_generator],
            )
            for opt in self._raw_optimizers:
                if not getattr(opt, "_prism_drops_static", False):
                    opt.register_load_state_dict_post_hook(lambda _opt: setattr(self, "_static", None))
                    opt._prism_drops_static = True
            self._static, self._static_key = runner, key
        return runner

    def update(self, batch: ReplayBatch) -> torch.Tensor:
        return capql_update(
            self.nets,
            tuple(self._raw_optimizers),
            batch,
            self.hyper,
            self.obs_sign,
            self.act_sign,
            self._update_generator,
            self._polyak,
        )

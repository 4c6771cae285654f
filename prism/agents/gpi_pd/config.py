"""Typed configuration of the GPI-PD agent (Alegre et al., AAMAS 2023), continuous-action variant.

Defaults are those of morl-baselines' ``GPIPDContinuousAction`` (the reference implementation the paper's
continuous-control results come from); where that class has no knob for a fact we still name it here so a
reader sees every number the agent uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from prism.agents.config import OffPolicyConfig

_BUDGET_KEYS = (
    # What makes GPI-PD's RL slow at any budget: updates per env step, GPI-LS's iteration and its evaluation
    # episodes, and Dyna's fits and rollouts (conf/budget/tiny.yaml shrinks them).
    "gradient_updates",
    "timesteps_per_iter",
    "eval_episodes_per_weight",
    "dynamics_train_freq",
    "dynamics_rollout_starts",
    "dynamics_rollout_freq",
    "dynamics_rollout_batch_size",
    "dynamics_buffer_size",
)


@dataclass
class GPIPDConfig(OffPolicyConfig):
    """Hyperparameters of the GPI-PD agent (TD3-style vector critics, PER, Dyna, GPI-LS weight selection).

    The keys every off-policy backbone shares come from :class:`~prism.agents.config.OffPolicyConfig`
    (``cone_half_angle_deg`` is unused: GPI-PD trains on GPI-LS weights, not a cone); the run's seeds and
    device are the top-level ``seed`` / ``seeds`` / ``device``."""

    max_members: ClassVar[int] = 1
    """Population runs (``seeds`` with several seeds) are not supported yet: the config refuses them."""

    budget_keys: ClassVar[tuple[str, ...]] = (*OffPolicyConfig.budget_keys, *_BUDGET_KEYS)
    """Keys that only size compute (:attr:`OffPolicyConfig.budget_keys`), GPI-PD's own included: a budget
    overlay (``conf/budget/tiny.yaml``) sets them, and on a backbone without them they are skipped silently."""

    name: str = "gpi_pd"
    """Agent plug-in name."""

    lr: float = 3e-4
    """Adam learning rate of the policy and of the critics."""

    gamma: float = 0.99
    """Discount factor γ."""

    tau: float = 0.005
    """Polyak coefficient τ of the target critics and the target policy: ``θ̄ ← (1 − τ) θ̄ + τ θ``."""

    batch_size: int = 128
    """Replay transitions per update. When the weight support holds more than one weight, the batch is used
    twice (once with the current training weight, once with weights drawn from the support), so the
    networks see ``2 × batch_size`` rows per update."""

    buffer_size: int = 400_000
    """Capacity of the (prioritised) real-experience replay."""

    net_arch: list[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer sizes of the policy and of every critic."""

    n_critics: int = 2
    """Number of vector critics Q_k(s, a, w) ∈ R^L; the target uses the one with the smallest w·Q̄_k."""

    critic_layer_norm: bool = True
    """LayerNorm after every hidden linear layer of the critics (order: Linear → Dropout → LayerNorm → ReLU)."""

    critic_dropout: float = 0.01
    """Dropout rate after every hidden linear layer of the critics (active in training mode, targets too)."""

    policy_delay: int = 2
    """The policy (and its target) is updated on every ``policy_delay``-th gradient update."""

    learning_starts: int = 100
    """Env steps with uniform random actions before the first update."""

    gradient_updates: int = 20
    """Gradient updates per env step (the paper's UTD ratio; the dominant compute cost)."""

    policy_noise: float = 0.2
    """Std of the Gaussian noise added to the (target) policy's action: target smoothing and exploration."""

    noise_clip: float = 0.5
    """The noise is clipped to ``[−noise_clip, noise_clip]`` before it is added."""

    per: bool = True
    """Prioritised experience replay (proportional, priorities from the scalarised TD error)."""

    per_alpha: float = 0.6
    """PER exponent α: ``p_i = max(0.05·w·|Q_1 − y|, min_priority)^α``."""

    per_min_priority: float = 0.1
    """Floor of a transition's priority before the exponent α is applied."""

    per_beta: float = 0.0
    """Importance-sampling exponent β of the critic loss; 0 (no correction) is what morl-baselines does."""

    dyna: bool = True
    """Train a dynamics model and add model rollouts to the updates (model-based part of GPI-PD)."""

    dynamics_net_arch: list[int] = field(default_factory=lambda: [200, 200, 200, 200])
    """Hidden layer sizes of each member of the probabilistic dynamics ensemble."""

    dynamics_train_freq: int = 250
    """Env steps between two fits of the dynamics model."""

    dynamics_rollout_len: int = 5
    """Length of each model rollout."""

    dynamics_rollout_starts: int = 1000
    """Env step from which model rollouts are made."""

    dynamics_rollout_freq: int = 250
    """Env steps between two rounds of model rollouts."""

    dynamics_rollout_batch_size: int = 50_000
    """Start states per round of model rollouts (processed in chunks of at most 10 000)."""

    dynamics_buffer_size: int = 200_000
    """Capacity of the buffer of model-generated transitions."""

    dynamics_min_uncertainty: float = 2.0
    """A model transition is kept only when the ensemble's uncertainty is below this threshold."""

    dynamics_real_ratio: float = 0.1
    """Fraction of each update's batch drawn from real experience once model rollouts exist."""

    timesteps_per_iter: int = 10_000
    """Env steps of one GPI-LS iteration (one training weight, then the CCS is updated)."""

    eval_episodes_per_weight: int = 5
    """Episodes averaged to estimate a value vector when updating the CCS and the GPI-LS priorities."""

    corner_weights_top_k: int = 4
    """Highest-priority corner weights added to the weight support of an iteration."""

    symreg_lambda: float | None = None
    """SymReg weight λ on the deterministic actor's pre-tanh output; ``None`` takes the env spec's default."""

    log_every: int = 1000
    """Env steps between two writes of ``train/``, ``rollout/`` and ``time/`` scalars."""

    steps_per_batch: int = 1
    """(env step, update) iterations per Lightning training batch (only amortises Lightning's overhead)."""

    def validate(self) -> None:
        """Raise ``ValueError`` whose message starts with ``agent.<field>`` if a value is out of range."""
        super().validate()
        checks = {
            "lr": self.lr > 0.0,
            "gamma": 0.0 <= self.gamma <= 1.0,
            "tau": 0.0 < self.tau <= 1.0,
            "batch_size": self.batch_size > 0,
            "buffer_size": self.buffer_size >= self.batch_size,
            "net_arch": len(self.net_arch) > 0 and all(h > 0 for h in self.net_arch),
            "n_critics": self.n_critics >= 1,
            "critic_dropout": 0.0 <= self.critic_dropout < 1.0,
            "policy_delay": self.policy_delay >= 1,
            "learning_starts": self.learning_starts >= 0,
            "gradient_updates": self.gradient_updates >= 1,
            "policy_noise": self.policy_noise >= 0.0,
            "noise_clip": self.noise_clip >= 0.0,
            "per_alpha": self.per_alpha >= 0.0,
            "per_min_priority": self.per_min_priority > 0.0,
            "per_beta": 0.0 <= self.per_beta <= 1.0,
            "dynamics_net_arch": len(self.dynamics_net_arch) > 0
            and all(h > 0 for h in self.dynamics_net_arch),
            "dynamics_train_freq": self.dynamics_train_freq > 0,
            "dynamics_rollout_len": self.dynamics_rollout_len > 0,
            "dynamics_rollout_starts": self.dynamics_rollout_starts >= 0,
            "dynamics_rollout_freq": self.dynamics_rollout_freq > 0,
            "dynamics_rollout_batch_size": self.dynamics_rollout_batch_size > 0,
            "dynamics_buffer_size": self.dynamics_buffer_size > 0,
            "dynamics_min_uncertainty": self.dynamics_min_uncertainty > 0.0,
            "dynamics_real_ratio": 0.0 <= self.dynamics_real_ratio <= 1.0,
            "timesteps_per_iter": self.timesteps_per_iter > 0,
            "eval_episodes_per_weight": self.eval_episodes_per_weight > 0,
            "corner_weights_top_k": self.corner_weights_top_k >= 0,
            "symreg_lambda": self.symreg_lambda is None or self.symreg_lambda >= 0.0,
            "log_every": self.log_every > 0,
            "steps_per_batch": self.steps_per_batch > 0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"agent.{bad[0]}: invalid value {vars(self)[bad[0]]!r}")

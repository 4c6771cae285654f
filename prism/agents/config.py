"""Typed configuration of the backbones (``agent:`` in a run config; docs/method.md §6, §7).

``agent:`` is typed by the chosen backbone's own dataclass: ``agent.name`` selects a backbone registered in
:mod:`prism.plugins` (or a class path with a ``config_class``), and the config loader merges the ``agent.*``
keys onto that backbone's dataclass, so every backbone brings its own keys and an unknown key for the chosen
one is refused. :class:`OffPolicyConfig` holds the keys of every :class:`~prism.agents.off_policy.OffPolicyAgent`
backbone (replay, warm-up, preference sampling, logging); :class:`CAPQLConfig` adds CAPQL's.

The run's seed(s) and device are not agent keys: they are the run's (top-level ``seed``/``seeds`` and
``device``) and are passed to the agent explicitly (``seeds=``, the Trainer's accelerator).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from prism.core import checks

TANH_LOG_PROB_FORMS = ("exact", "epsilon")
"""The forms of ``agent.tanh_log_prob`` (:func:`prism.agents.networks.sample_tanh_gaussian`)."""

SymmetryMode = Literal["regularise", "exact", "none"]


@dataclass
class OffPolicyConfig:
    """The keys every off-policy backbone (a subclass of ``OffPolicyAgent``) takes; a backbone's config
    dataclass subclasses this one and adds its own keys (with defaults)."""

    budget_keys: ClassVar[tuple[str, ...]] = ("learning_starts", "buffer_size", "log_every")
    """The keys that only size a run's compute (warm-up, replay, logging), not which method it is. A budget
    overlay (``conf/budget/``) sets them for every backbone: in a config file, one that the chosen backbone
    lacks but another backbone lists here is skipped **silently** (:mod:`prism.config.agent_keys`; other
    foreign keys warn), so ``conf/budget/tiny.yaml`` can size GPI-PD's updates and still compose with CAPQL."""
    max_members: ClassVar[int | None] = None
    """The most population members one process trains (None: any number; GPI-PD's is 1)."""

    name: str = "capql"
    """The backbone: a name registered in :mod:`prism.plugins` (``capql``) or a class path
    ``package.module:Class`` with a ``config_class`` attribute, taking
    ``(config, spec, env_factory, shapers, *, seeds, sparse_channel, target_env_steps)``."""

    learning_starts: int = 1000
    """Env steps taken with uniform random actions before the first update (and before the policy acts)."""

    batch_size: int = 128
    """Replay transitions per update."""

    buffer_size: int = 1_000_000
    """Replay capacity in transitions (at least ``batch_size``); the oldest are overwritten when full."""

    cone_half_angle_deg: float = 22.5
    """Half-angle of the cone around the uniform weight that training preferences are drawn from."""

    log_every: int = 1000
    """Env steps between two writes of ``train/``, ``rollout/`` and ``time/`` scalars."""

    steps_per_batch: int = 8
    """(env step, update) iterations per Lightning training batch: the run is the same for any value (a batch
    also ends at every step a callback asked to see with ``agent.pause_at``), only Lightning's per-batch cost
    is amortised. A custom callback that reads the clock in ``on_train_batch_end`` without asking for its
    steps sees every 8th step; set 1 to see every step."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` (one line, starting with the ``agent.*`` key) if a value is out of range.

        Run on construction; a subclass extends it (``super().validate()`` first) for its own keys."""
        checks.non_negative("agent.learning_starts", self.learning_starts)
        checks.positive("agent.batch_size", self.batch_size)
        checks.require(
            "agent.buffer_size",
            self.buffer_size >= self.batch_size,
            f"be at least agent.batch_size ({self.batch_size})",
            self.buffer_size,
        )
        checks.require(
            "agent.cone_half_angle_deg",
            0.0 <= self.cone_half_angle_deg < 90.0,
            "lie in [0, 90)",
            self.cone_half_angle_deg,
        )
        checks.positive("agent.log_every", self.log_every)
        checks.positive("agent.steps_per_batch", self.steps_per_batch)

    def off_policy_kwargs(self) -> dict[str, int | float]:
        """These keys as the keyword arguments of ``OffPolicyAgent.__init__``."""
        return {
            "learning_starts": self.learning_starts,
            "batch_size": self.batch_size,
            "buffer_size": self.buffer_size,
            "cone_half_angle_deg": self.cone_half_angle_deg,
            "log_every": self.log_every,
            "steps_per_batch": self.steps_per_batch,
        }


@dataclass
class CAPQLConfig(OffPolicyConfig):
    """Hyperparameters of :class:`prism.agents.capql.CAPQLModule` (``agent.name: capql``); defaults are the
    paper's (docs/method.md §6). ``conf/agent/capql.yaml`` lists them all."""

    gamma: float = 0.99
    """Discount factor γ, in (0, 1]."""

    tau: float = 0.005
    """Polyak coefficient τ of the target critics: ``θ̄ ← (1 − τ) θ̄ + τ θ`` after every update."""

    alpha: float = 0.2
    """Fixed entropy coefficient α (CAPQL does not tune it)."""

    lr: float = 3e-4
    """Adam learning rate of both the actor and the critics."""

    actor_hidden: list[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer sizes of the policy MLP (ReLU, orthogonal init)."""

    critic_hidden: list[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer sizes of each of the two vector critics."""

    n_critics: int = 2
    """Number of critics in the clipped ensemble (2 = clipped double-Q)."""

    critic_layer_norm: bool = False
    """A stabiliser, off by default (CAPQL's critics have none): LayerNorm after each hidden layer of every
    critic (and target), ``ReLU(LN(x W + b))``. Chosen against a diverging critic (docs/method.md §6): with
    LayerNorm a critic's output is bounded by its last layer's weights whatever the input, so Q-values cannot
    run away through extrapolation to actions the data never shows (Ball et al. 2023, RLPD), and TD learning
    with it is provably stable where plain TD can diverge (Gallici et al. 2024, "Simplifying deep temporal
    difference learning"); a gradient clip only slows a divergence that the targets feed."""

    tanh_log_prob: Literal["exact", "epsilon"] = "exact"
    """How log π(a) corrects for the tanh squashing (docs/method.md §6): ``exact`` (the default) is
    ``log(1 − tanh² u)`` in a form that cannot underflow; ``epsilon`` is morl-baselines' CAPQL (and SB3's):
    ``log(1 − tanh² u + 1e-6)`` with log π clamped to ±1e3, whose correction stops growing once a mean
    saturates (the one difference in the update maths between prism's CAPQL and morl-baselines', kept so the
    two can be compared)."""

    symreg_lambda: float | None = None
    """SymReg weight λ (docs/method.md §7); ``None`` takes the env spec's per-env default; 0 is the "w/o loss" ablation."""

    symmetry_mode: SymmetryMode = "regularise"
    """``regularise``: add λ·L_eq to the actor loss; ``exact``: orbit-average the actor so it is exactly
    equivariant (SymReg is then identically 0 and skipped); ``none``: no symmetry at all (plain CAPQL)."""

    cuda_graph: bool | Literal["auto"] = "auto"
    """On CUDA, capture the update (static replay buffers, capturable fused Adam, in-place Polyak) once in a
    CUDA graph and replay it (prism/agents/static_update.py); re-captured when what it points at changes. The
    replay draw and a ``reward.relabel`` function stay eager. ``auto`` (the default) and ``true`` capture on
    CUDA; the CPU has no graphs, so there the same static-buffer update runs eagerly; ``false`` keeps CUDA eager
    too. On by default since ``tools/gpu_check.sh`` passed on an H200 (docs/benchmarks.md: replay equals the
    eager path to 0.0 over 100 updates)."""

    def graph_on(self, device: object) -> bool:
        """Whether the update is captured in a CUDA graph on ``device`` (a ``torch.device`` or its name; only
        CUDA has graphs)."""
        return self.cuda_graph is not False and str(device).split(":")[0] == "cuda"

    def validate(self) -> None:
        super().validate()
        checks.require("agent.gamma", 0.0 < self.gamma <= 1.0, "lie in (0, 1]", self.gamma)
        checks.require("agent.tau", 0.0 < self.tau <= 1.0, "lie in (0, 1]", self.tau)
        checks.non_negative("agent.alpha", self.alpha)
        checks.positive("agent.lr", self.lr)
        checks.sizes("agent.actor_hidden", self.actor_hidden)
        checks.sizes("agent.critic_hidden", self.critic_hidden)
        checks.positive("agent.n_critics", self.n_critics)
        checks.require(
            "agent.critic_layer_norm", isinstance(self.critic_layer_norm, bool), "be true or false",
            self.critic_layer_norm,
        )  # fmt: skip
        checks.require(
            "agent.cuda_graph",
            isinstance(self.cuda_graph, bool) or self.cuda_graph == "auto",
            "be auto, true or false",
            self.cuda_graph,
        )
        checks.require(
            "agent.tanh_log_prob",
            self.tanh_log_prob in TANH_LOG_PROB_FORMS,
            "be " + " or ".join(TANH_LOG_PROB_FORMS),
            self.tanh_log_prob,
        )
        if self.symreg_lambda is not None:
            checks.non_negative("agent.symreg_lambda", self.symreg_lambda)
        checks.require(
            "agent.symmetry_mode",
            self.symmetry_mode in ("regularise", "exact", "none"),
            "be regularise, exact or none",
            self.symmetry_mode,
        )

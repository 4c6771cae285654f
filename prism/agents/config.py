"""Typed configuration of the CAPQL agent (SPEC §6, §7)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

SymmetryMode = Literal["regularise", "exact", "none"]
DeviceName = Literal["auto", "cpu", "cuda"]


@dataclass
class AgentConfig:
    """Hyperparameters of :class:`prism.agents.capql.CAPQLModule`; defaults are the paper's (SPEC §6)."""

    name: str = "capql"
    """Agent plug-in: a registered name (``capql``) or a class path ``package.module:Class`` taking
    ``(config, spec, env_factory, shaper, *, sparse_channel, target_env_steps)``."""

    learning_starts: int = 1000
    """Env steps taken with uniform random actions before the first update (and before the policy acts)."""

    batch_size: int = 128
    """Replay transitions per update."""

    buffer_size: int = 1_000_000
    """Replay capacity in transitions; the oldest are overwritten when full."""

    gamma: float = 0.99
    """Discount factor γ."""

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

    cone_half_angle_deg: float = 22.5
    """Half-angle of the cone around the uniform weight that training preferences are drawn from."""

    symreg_lambda: float | None = None
    """SymReg weight λ (SPEC §7); ``None`` takes the env spec's per-env default; 0 is the "w/o loss" ablation."""

    symmetry_mode: SymmetryMode = "regularise"
    """``regularise``: add λ·L_eq to the actor loss; ``exact``: orbit-average the actor so it is exactly
    equivariant (SymReg is then identically 0 and skipped); ``none``: no symmetry at all (plain CAPQL)."""

    log_every: int = 1000
    """Env steps between two writes of ``train/``, ``rollout/`` and ``time/`` scalars."""

    steps_per_batch: int = 8
    """(env step, update) iterations per Lightning training batch: the run is the same for any value (a batch
    also ends at every step a callback asked to see with ``agent.pause_at``), only Lightning's per-batch cost
    is amortised. A custom callback that reads the clock in ``on_train_batch_end`` without asking for its
    steps sees every 8th step; set 1 to see every step."""

    device: DeviceName = "auto"
    """``auto`` = CUDA when available, else CPU. Everything (nets, replay buffer) lives on this one device."""

    seed: int | None = None
    """Seed of the env's first reset and of the action/preference samplers; None draws it from torch's global
    RNG (so ``lightning.seed_everything`` makes runs reproducible)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field if a value is out of range."""
        checks = {
            "learning_starts": self.learning_starts >= 0,
            "batch_size": self.batch_size > 0,
            "buffer_size": self.buffer_size >= self.batch_size,
            "gamma": 0.0 <= self.gamma <= 1.0,
            "tau": 0.0 < self.tau <= 1.0,
            "alpha": self.alpha >= 0.0,
            "lr": self.lr > 0.0,
            "actor_hidden": len(self.actor_hidden) > 0 and all(h > 0 for h in self.actor_hidden),
            "critic_hidden": len(self.critic_hidden) > 0 and all(h > 0 for h in self.critic_hidden),
            "n_critics": self.n_critics >= 1,
            "cone_half_angle_deg": 0.0 <= self.cone_half_angle_deg < 90.0,
            "symreg_lambda": self.symreg_lambda is None or self.symreg_lambda >= 0.0,
            "symmetry_mode": self.symmetry_mode in ("regularise", "exact", "none"),
            "log_every": self.log_every > 0,
            "steps_per_batch": self.steps_per_batch > 0,
            "device": self.device in ("auto", "cpu", "cuda"),
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"agent.{bad[0]}: invalid value {getattr(self, bad[0])!r}")

    def torch_device(self) -> torch.device:
        """The device ``device`` resolves to on this machine."""
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    def accelerator(self) -> str:
        """The Lightning ``Trainer(accelerator=...)`` value matching :meth:`torch_device`."""
        return "gpu" if self.torch_device().type == "cuda" else "cpu"

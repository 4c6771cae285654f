"""Typed configuration of the reward package (``reward:`` in a run config)."""

from __future__ import annotations

from dataclasses import dataclass

REWARD_NAMES = ("resymnet", "uniform", "random", "none")


@dataclass
class RewardConfig:
    """How the sparse channel is redistributed and, for ``resymnet``, how the reward model is fitted (SPEC §4–5)."""

    name: str = "resymnet"
    """Redistribution of the sparse channel: ``resymnet`` (learned per-step prediction), ``uniform`` (R/T),
    ``random`` (R·α_t/Σα, α_t ~ U(−1, 1)), ``none`` (the channel as emitted: the baseline), or a class path
    ``package.module:Name`` of a user shaper (one with ``needs_model = True`` gets a fitted ensemble)."""
    ensemble_size: int = 3
    """Number K of ensemble members; K = 1 is the "w/o ensemble" ablation."""
    hidden: int = 256
    """Hidden width of ReSymNet."""
    dropout: float = 0.3
    """Dropout probability inside the residual blocks (training only; prediction is in eval mode)."""
    residual: bool = True
    """Two residual blocks (True) or the "w/o residual" ablation ``Linear→LN→ReLU→Linear``."""
    use_dense_features: bool = True
    """``h_t = [s_t, a_t, r_dense_t]`` (True) or the "w/o dense rewards" ablation ``h_t = [s_t, a_t]``."""
    lr: float = 0.005
    """AdamW learning rate."""
    weight_decay: float = 0.01
    """AdamW (decoupled) weight decay."""
    grad_clip: float = 1.0
    """Gradient-norm clip, applied per ensemble member (as if each were trained alone)."""
    lr_decay: float = 0.99
    """ExponentialLR factor, stepped once per epoch."""
    batch_size: int = 32
    """Segments per training batch."""
    max_epochs: int = 1000
    """Upper bound on training epochs."""
    patience: int = 20
    """Epochs without a validation improvement before a member stops (its best weights are restored)."""
    val_fraction: float = 0.2
    """Fraction of segments held out for validation (split by segment, seeded)."""
    threads: int = 0
    """CPU threads torch uses during a fit (restored afterwards); 0 = the caller's count (in a run, the run's
    ``threads``). On one thread the fit already keeps a second core busy drawing dropout masks ahead, so more
    threads pay only on an otherwise idle machine: OpenMP threads that share cores with other jobs stall
    each other (measured 3× *slower* with 2 threads on a loaded 2-core machine)."""
    relabel: bool = False
    """Also relabel the sparse channel of replay samples with the current model at update time (not the
    paper's default, which shapes once at env-step time)."""

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field when a value is out of range (called by the fitting and
        shaping entry points; the run-config loader has its own checks)."""
        # A class path (``package.module:Name``) is a user plug-in; the registry resolves and checks it.
        if self.name not in REWARD_NAMES and ":" not in self.name and "." not in self.name:
            raise ValueError(f"reward.name: {self.name!r} is not one of {', '.join(REWARD_NAMES)}")
        checks = {
            "ensemble_size": self.ensemble_size >= 1,
            "hidden": self.hidden >= 1,
            "dropout": 0.0 <= self.dropout < 1.0,
            "lr": self.lr > 0,
            "weight_decay": self.weight_decay >= 0,
            "grad_clip": self.grad_clip > 0,
            "lr_decay": 0 < self.lr_decay <= 1,
            "batch_size": self.batch_size >= 1,
            "max_epochs": self.max_epochs >= 1,
            "patience": self.patience >= 1,
            "val_fraction": 0.0 < self.val_fraction < 1.0,
            "threads": self.threads >= 0,
        }
        for field_name, ok in checks.items():
            if not ok:
                raise ValueError(f"reward.{field_name}: invalid value {getattr(self, field_name)!r}")

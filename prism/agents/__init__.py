"""MORL agents: CAPQL as a LightningModule, its pure losses, networks, symmetry operators, preferences.

The names below are imported on first access (PEP 562), so importing this package (as the config loader
does) pulls in neither torch nor Lightning.
"""

from __future__ import annotations

from prism.core._lazy import lazy_exports

_LAZY = {
    "CAPQLModule": "prism.agents.capql",
    "CAPQLConfig": "prism.agents.config",
    "OffPolicyConfig": "prism.agents.config",
    "ActorLoss": "prism.agents.losses",
    "CriticLoss": "prism.agents.losses",
    "SymRegLoss": "prism.agents.losses",
    "actor_loss": "prism.agents.losses",
    "capql_actor_loss": "prism.agents.losses",
    "capql_critic_loss": "prism.agents.losses",
    "critic_loss": "prism.agents.losses",
    "critic_target": "prism.agents.losses",
    "symreg_loss": "prism.agents.losses",
    "GaussianActor": "prism.agents.networks",
    "StackedCritics": "prism.agents.networks",
    "StackedPolicyNet": "prism.agents.networks",
    "VectorCriticEnsemble": "prism.agents.networks",
    "sample_tanh_gaussian": "prism.agents.networks",
    "cone_weights": "prism.agents.preferences",
    "OrbitAveragedActor": "prism.agents.symmetry",
    "Reflection": "prism.agents.symmetry",
    "equivariance_error": "prism.agents.symmetry",
    "per_state_equivariance_error": "prism.agents.symmetry",
    "reflect_act": "prism.agents.symmetry",
    "reflect_obs": "prism.agents.symmetry",
    "reflection_from_spec": "prism.agents.symmetry",
}
"""Public name -> the module defining it (imported on first access)."""


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


__all__ = sorted(_LAZY)

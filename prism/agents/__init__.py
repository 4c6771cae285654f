"""MORL agents: CAPQL as a LightningModule, its pure losses, networks, symmetry operators, preferences."""

from prism.agents.capql import CAPQLModule
from prism.agents.config import CAPQLConfig, OffPolicyConfig
from prism.agents.losses import (
    ActorLoss,
    CriticLoss,
    SymRegLoss,
    actor_loss,
    capql_actor_loss,
    capql_critic_loss,
    critic_loss,
    critic_target,
    symreg_loss,
)
from prism.agents.networks import GaussianActor, VectorCriticEnsemble, sample_tanh_gaussian
from prism.agents.preferences import cone_weights
from prism.agents.symmetry import (
    OrbitAveragedActor,
    Reflection,
    equivariance_error,
    per_state_equivariance_error,
    reflect_act,
    reflect_obs,
    reflection_from_spec,
)

__all__ = [
    "ActorLoss",
    "CAPQLConfig",
    "CAPQLModule",
    "CriticLoss",
    "GaussianActor",
    "OffPolicyConfig",
    "OrbitAveragedActor",
    "Reflection",
    "SymRegLoss",
    "VectorCriticEnsemble",
    "actor_loss",
    "capql_actor_loss",
    "capql_critic_loss",
    "critic_loss",
    "critic_target",
    "cone_weights",
    "equivariance_error",
    "per_state_equivariance_error",
    "reflect_act",
    "reflect_obs",
    "reflection_from_spec",
    "sample_tanh_gaussian",
    "symreg_loss",
]

"""GPI-PD (Alegre et al., AAMAS 2023), continuous actions: config, networks, losses, prioritised replay and
GPI-LS weight support. The Dyna dynamics model lives in ``dynamics.py`` (separate module)."""

from prism.agents.gpi_pd.config import GPIPDConfig
from prism.agents.gpi_pd.networks import DeterministicActor, VectorCritics
from prism.agents.gpi_pd.per import PrioritySampler
from prism.agents.gpi_pd.weight_support import GPILinearSupport, corner_weights, gpi_ls_priorities

__all__ = [
    "DeterministicActor",
    "GPILinearSupport",
    "GPIPDConfig",
    "PrioritySampler",
    "VectorCritics",
    "corner_weights",
    "gpi_ls_priorities",
]

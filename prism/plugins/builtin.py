"""The built-in plug-ins, each registered exactly once, by :func:`register`.

:func:`register` is prism's entry point in the group ``prism.plugins`` (declared in prism's own
pyproject.toml); the registry loads that group on its first lookup, so it never imports this module by name.
A plug-in outside prism registers the same way from its own package (docs/ARCHITECTURE.md, "Adding a reward
model" and "Adding a backbone"). Factories are class paths, so registering (and so the config loader) imports
no network code; the config dataclasses are imported directly, because the config loader needs them to type
the ``agent:`` node.
"""

from __future__ import annotations

from prism.agents.config import CAPQLConfig
from prism.agents.gpi_pd.config import GPIPDConfig
from prism.plugins.registry import AGENTS, REWARDS, register_reward_model


def register() -> None:
    """Register prism's built-in backbones, reward models and reward methods (once, by the registry)."""
    # ---- backbones (agent.name) -------------------------------------------------------------------------
    AGENTS.register("capql", factory="prism.agents.capql:CAPQLModule", config=CAPQLConfig)
    AGENTS.register("gpi_pd", factory="prism.agents.gpi_pd.agent:GPIPDAgent", config=GPIPDConfig)

    # ---- learned reward models, each with the reward method of the same name (reward.name) ---------------
    register_reward_model(
        "resymnet",
        fitter="prism.reward.models.resymnet_fit:fit_resymnet_model",
        load="prism.reward.models.resymnet:ReSymNetRewardModel.from_dict",
        population_fitter="prism.reward.models.resymnet_fit:fit_resymnet_population",
        config="prism.reward.config:ReSymNetConfig",
    )
    # RRD (randomized return decomposition), fitted per member: r̂(s, a, s') reads the next observation.
    register_reward_model(
        "rrd",
        fitter="prism.reward.models.rrd:fit_rrd_model",
        load="prism.reward.models.rrd:RRDRewardModel.from_dict",
        next_obs=True,
        config="prism.reward.config:RRDRewardConfig",
    )

    # ---- reward methods without a learned model (reward.name) -------------------------------------------
    REWARDS.register("none", shaper="prism.reward.shapers:pass_through_shaper")
    REWARDS.register("uniform", shaper="prism.reward.shapers:uniform_shaper")
    REWARDS.register("random", shaper="prism.reward.shapers:random_shaper")

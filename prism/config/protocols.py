"""Experimental protocols: how the arms of a comparison are budgeted and built (docs/method.md §8a).

``equal`` (the default) gives every method the same RL budget (``loop.cycles × loop.steps_per_cycle`` env
steps) and the same agent; methods then differ only in the reward the agent learns from and in SymReg's λ.

``released`` runs the arms the way the authors' released code (github.com/EVIEHub/PRISM) ran them for the
paper's tables, so that prism can measure how much of the paper's gain those differences explain:

* **Oracle and baseline** — the arms without a reward model or redistribution (``reward.name: none``) — are
  plain CAPQL trained **once for M env steps** (``src/pareto_front/main.py`` calls ``algo.train(total_timesteps=
  refinement_timesteps)`` one time): ``loop.cycles`` becomes 1, with the paper's actor (obs+w → 256 → 256 →
  heads) and no SymReg (λ = 0; ``capql.py`` has none).
* **The PRISM-side arms** (PRISM and every ablation, uniform and random included) train **IR × M** env steps
  (``main_eq.py`` trains M steps inside its refinement loop), with **λ = 1** on every env (the released
  ``configs/shaping/main.yaml``; the paper's table says 0.01 / 1 / 0.01 / 0.005) and the **released actor**,
  which has one more hidden layer of 256 (``capql_equivariance.py`` builds its trunk with
  ``mlp(in, net_arch[-1], net_arch)``): obs+w → 256 → 256 → 256 → heads. The "w/o loss" ablation keeps its
  λ = 0, which is what it ablates.

Nothing else changes (the environment, the reward models, CAPQL's other hyperparameters, evaluation). The
protocol is applied once, when a config is loaded, to the keys it governs; the result is what config.yaml
records, and applying it again changes nothing (so ``--resume`` reloads the same config). A governed key set to
a value the protocol does not allow is refused, naming the key, rather than silently replaced.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from prism.config.schema import PROTOCOLS as PROTOCOLS  # re-exported: the accepted values of ``protocol``
from prism.config.schema import RunConfig
from prism.core.errors import ConfigError

if TYPE_CHECKING:
    from prism.envs import EnvSpec

PAPER_ACTOR_HIDDEN = [256, 256]
"""The policy trunk of the paper's CAPQL (and of the released oracle/baseline): obs+w → 256 → 256 → heads."""

RELEASED_ACTOR_HIDDEN = [256, 256, 256]
"""The policy trunk of the released PRISM-side agent: one more Linear(256, 256) + ReLU before the heads."""

RELEASED_SYMREG_LAMBDA = 1.0
"""SymReg's λ in the released config, the same on every env."""

RELEASED_AGENT = "capql"
"""The backbone the released protocol is defined for."""


def is_model_free_arm(config: RunConfig) -> bool:
    """True for the arms without a reward model or redistribution (``reward.name: none``): the oracle (dense
    env) and the baseline (the sparse wrapper's output as emitted)."""
    return config.reward.name == "none"


def apply_protocol(config: RunConfig, spec: EnvSpec) -> RunConfig:
    """The config with its ``protocol`` applied (a new object; ``equal`` returns ``config`` unchanged).

    Idempotent: ``apply_protocol(apply_protocol(c)) == apply_protocol(c)``. Raises :class:`ConfigError` (one
    line, starting with the key) when a key the protocol governs holds a value the protocol does not allow."""
    if config.protocol == "equal":
        return config
    if config.agent.name != RELEASED_AGENT:
        raise ConfigError(
            f"protocol: released is defined for the {RELEASED_AGENT} backbone (the released code's agent), "
            f"got agent.name={config.agent.name}; use protocol=equal"
        )
    agent, loop = config.agent, config.loop
    if is_model_free_arm(config):
        # Oracle / baseline: one call of CAPQL.train(M) with the paper's actor and no SymReg.
        actor, symreg_lambda, cycles = PAPER_ACTOR_HIDDEN, 0.0, 1
    else:
        # PRISM-side: IR × M steps (loop.cycles unchanged), λ = 1 where SymReg is on, the released actor.
        actor, cycles = RELEASED_ACTOR_HIDDEN, loop.cycles
        ablated = agent.symreg_lambda == 0.0  # "w/o loss" keeps what it ablates
        symreg_lambda = 0.0 if ablated or not spec.has_symmetry else RELEASED_SYMREG_LAMBDA
    if list(agent.actor_hidden) not in (PAPER_ACTOR_HIDDEN, actor):
        raise ConfigError(
            f"agent.actor_hidden: protocol=released fixes this arm's actor to {actor}, got "
            f"{list(agent.actor_hidden)}; drop the key or use protocol=equal"
        )
    return dataclasses.replace(
        config,
        loop=dataclasses.replace(loop, cycles=cycles),
        agent=dataclasses.replace(agent, actor_hidden=list(actor), symreg_lambda=symreg_lambda),
    )

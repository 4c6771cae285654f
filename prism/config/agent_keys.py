"""The ``agent.*`` keys of a config file layer against the chosen backbone, and the method label vs SymReg.

A method or ablation overlay (``conf/method/baseline.yaml``, ``conf/ablation/wo_loss.yaml``) or a paper env
file (``conf/hopper.yaml``) sets ``agent.symreg_lambda``, a key of the backbones with SymReg (CAPQL, GPI-PD).
With a backbone without SymReg (the DDPG example of docs/ARCHITECTURE.md) such a key is **skipped with a
one-line warning** naming the key, the file and the backbone, so every overlay composes with every backbone.
Only keys that some registered backbone has are skipped, and only in config files: a key no backbone has (a
typo) is still refused, and a ``key=value`` override on the command line, typed for this run, is refused
too. A **budget key** (a key that only sizes compute, listed in its backbone's ``budget_keys``, e.g. GPI-PD's
``gradient_updates`` in ``conf/budget/tiny.yaml``) is skipped silently: a budget overlay sizes every backbone
it may meet, and skipping such a key changes no method. A run that says ``method: prism`` on a backbone without SymReg warns once that it is shaping only
(:mod:`prism.config.methods`). Warnings go to the ``prism.config`` logger, each message once per process.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from prism.config.methods import SYMREG_KEY, derive_method
from prism.plugins.registry import AGENTS

_LOG = logging.getLogger("prism.config")
_WARNED: set[str] = set()
_HELD: list[list[str]] = []  # one list per open warnings_held() block, innermost last


def warn_once(message: str) -> None:
    """Log a one-line config warning (starting with the key) once per process: a config that runs, but
    probably not as its author expects. With no logging set up it reaches stderr as the bare line. Inside
    :func:`warnings_held` it is held back instead."""
    if message in _WARNED:
        return
    if _HELD:
        if message not in _HELD[-1]:
            _HELD[-1].append(message)
        return
    _WARNED.add(message)
    _LOG.warning(message)


@contextmanager
def warnings_held() -> Iterator[list[str]]:
    """Hold back the config warnings of the block, in the list yielded: a caller that loads a config only to
    compare it (``--resume`` with --config) says them (:func:`warn_once`) only if the config is used, not
    before the error that refuses it."""
    held: list[str] = []
    _HELD.append(held)
    try:
        yield held
    finally:
        _HELD.remove(held)


def _fields(config_class: type) -> set[str]:
    return {f.name for f in dataclasses.fields(config_class)}


def _other_backbones(agent_class: type) -> list[tuple[str, type]]:
    """(name, config class) of every registered backbone other than ``agent_class``'s."""
    out = []
    for entry in AGENTS:
        try:
            config_class = entry.config_class()
        except Exception:  # a plug-in whose config cannot be imported contributes no keys
            continue
        if config_class is agent_class or not dataclasses.is_dataclass(config_class):
            continue
        out.append((entry.name, config_class))
    return out


def _other_backbones_keys(agent_class: type) -> dict[str, list[str]]:
    """key → the registered backbones (other than ``agent_class``'s) whose config has it."""
    owners: dict[str, list[str]] = {}
    for name, config_class in _other_backbones(agent_class):
        for key in _fields(config_class):
            owners.setdefault(key, []).append(name)
    return owners


def _budget_keys(agent_class: type) -> set[str]:
    """The keys that every other registered backbone having them lists in its ``budget_keys``."""
    budget: set[str] = set()
    other: set[str] = set()
    for _, config_class in _other_backbones(agent_class):
        listed = set(getattr(config_class, "budget_keys", ()))
        budget |= listed & _fields(config_class)
        other |= _fields(config_class) - listed
    return budget - other


def foreign_key_hint(full_key: str, agent_class: type) -> str:
    """For an ``agent.<key>`` the chosen backbone lacks: ``"; it is a key of gpi_pd (agent.name=gpi_pd)"``
    when other registered backbones have it, else ``""``."""
    key = full_key.removeprefix("agent.")
    if not full_key.startswith("agent.") or "." in key or key in _fields(agent_class):
        return ""
    owners = sorted(_other_backbones_keys(agent_class).get(key, []))
    if not owners:
        return ""
    names = ", ".join(owners)
    return f"; it is a key of {names} (agent.name={owners[0]})" if len(owners) == 1 else f"; a key of {names}"


def prepare_agent_layer(layer: DictConfig, source: str | Path, agent_class: type, backbone: str) -> None:
    """Adapt the ``agent:`` node of one config file to the chosen backbone (in place).

    - A config.yaml written before ``agent.seed`` / ``agent.device`` were removed holds them with their only
      accepted values (``null``, ``auto``): dropped, so such a run folder still resumes and evaluates (any
      other value stays, and is refused naming the key's new place).
    - A key the backbone lacks but another registered backbone has (``symreg_lambda`` from a method overlay
      on a backbone without SymReg) is skipped with a one-line warning; silently when it is a budget key
      (``budget_keys``) of every backbone that has it.
    """
    agent = layer.get("agent") if isinstance(layer, DictConfig) else None
    if not isinstance(agent, DictConfig):
        return
    fields = _fields(agent_class)
    for key, legacy in (("seed", None), ("device", "auto")):
        if key in agent and key not in fields and agent.get(key) == legacy:
            del agent[key]
    foreign = [key for key in agent if key not in fields]
    if not foreign:
        return
    owners = _other_backbones_keys(agent_class)
    budget = _budget_keys(agent_class)
    for key in foreign:
        if key in budget:
            del agent[key]  # compute only (a budget overlay sizing another backbone): nothing to warn about
        elif key in owners:
            warn_once(
                f"agent.{key}: warning: skipped: {source} sets it, but backbone {backbone!r} has no such key "
                f"(it is a key of {', '.join(sorted(owners[key]))})"
            )
            del agent[key]


def check_method_label(config: Any) -> None:
    """Warn once when a run labelled ``prism`` uses a backbone without SymReg (ReSymNet shaping only)."""
    if config.method == "prism" and SYMREG_KEY not in _fields(type(config.agent)):
        warn_once(
            f"method: warning: the run is labelled prism (ReSymNet + SymReg) but backbone "
            f"{config.agent.name!r} has no SymReg (no agent.{SYMREG_KEY}): it trains with reward.name="
            f"{config.reward.name} only; leave method out (it is then {derive_method(config)}) or name the "
            "variant with method_label=<label>"
        )

"""The ``reward.*`` keys of a config layer against the chosen reward model.

``reward.name`` selects the dataclass of the ``reward:`` node (:func:`reward_config_class`): the registered
model's ``config`` (ReSymNet's :class:`~prism.reward.config.ReSymNetConfig`, RRD's
:class:`~prism.reward.config.RRDRewardConfig`), or the shared :class:`~prism.reward.config.RewardConfig` for a
method without a learned model (``none``, ``uniform``, ``random``, a class-path shaper that needs none).

A key of another registered model (``reward.hidden`` with ``reward.name=rrd``):

- in a ``key=value`` override, typed for this run, is refused in one line naming the model that has it
  (:func:`foreign_reward_key_hint`, added to OmegaConf's ``Key 'hidden' not in 'RRDRewardConfig'``);
- in a config file is skipped with a one-line warning naming the key, the file and the model, so an env file
  composes with every method overlay (``conf/walker.yaml conf/method/rrd.yaml``);
- in a run folder's config.yaml (``record``) is dropped silently: before ``reward:`` was typed per model
  (0.x, see CHANGELOG), a run wrote every model's keys, whatever its ``reward.name``.

A key no registered model has (a typo) is refused everywhere.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from prism.config.agent_keys import warn_once
from prism.core.errors import ConfigError

DEFAULT_REWARD = "resymnet"
"""The reward method of a config that does not set ``reward.name``."""


def _fields(config_class: type) -> set[str]:
    return {f.name for f in dataclasses.fields(config_class)}


def selected_reward(layers: list[DictConfig]) -> str:
    """``reward.name`` of the merged layers, read before the schema is known (default :data:`DEFAULT_REWARD`);
    anything odd falls back to the default, and the typed merge then reports it naming the key."""
    try:
        name = OmegaConf.select(OmegaConf.merge(*layers), "reward.name", default=DEFAULT_REWARD)
    except (OmegaConfBaseException, TypeError):
        return DEFAULT_REWARD
    return name if isinstance(name, str) else DEFAULT_REWARD


def reward_config_class(name: str, key: str = "reward.name") -> type:
    """The dataclass of ``reward:`` for the reward method ``name`` (its model's registered ``config``)."""
    from prism.plugins.registry import REWARD_MODELS, REWARDS
    from prism.reward.config import RewardConfig

    model = REWARDS.entry(key, name).model
    if model is None:
        return RewardConfig
    config_class = REWARD_MODELS.entry(key, model).config_class(key)
    if not (isinstance(config_class, type) and issubclass(config_class, RewardConfig)):
        raise ConfigError(
            f"{key}: the config class of reward model {model!r} is not a RewardConfig dataclass ({config_class!r})"
        )
    return config_class


def _other_models_keys(reward_class: type) -> dict[str, list[str]]:
    """key → the registered reward models (other than ``reward_class``'s) whose config has it."""
    from prism.plugins.registry import REWARD_MODELS

    owners: dict[str, list[str]] = {}
    for entry in REWARD_MODELS:
        try:
            config_class = entry.config_class()
        except ConfigError:  # a plug-in whose config cannot be imported contributes no keys
            continue
        if config_class is reward_class:
            continue
        for key in _fields(config_class) - _fields(reward_class):
            owners.setdefault(key, []).append(entry.name)
    return owners


def foreign_reward_key_hint(full_key: str, reward_class: type) -> str:
    """For a ``reward.<key>`` the chosen model lacks: ``"; it is a key of resymnet (reward.name=resymnet)"``
    when another registered model has it, else ``""``."""
    key = full_key.removeprefix("reward.").partition(".")[0]
    if not full_key.startswith("reward.") or key in _fields(reward_class):
        return ""
    owners = sorted(_other_models_keys(reward_class).get(key, []))
    if not owners:
        return ""
    names = ", ".join(owners)
    return f"; it is a key of {names} (reward.name={owners[0]})"


def prepare_reward_layer(
    layer: DictConfig, source: str | Path, reward_class: type, name: str, *, record: bool
) -> None:
    """Drop from one config file's ``reward:`` node the keys of other registered models (in place): with a
    one-line warning, or silently in a run folder's record (see the module docstring)."""
    reward = layer.get("reward") if isinstance(layer, DictConfig) else None
    if not isinstance(reward, DictConfig):
        return
    fields = _fields(reward_class)
    foreign = [key for key in reward if key not in fields]
    if not foreign:
        return
    owners = _other_models_keys(reward_class)
    for key in foreign:
        if key not in owners:
            continue  # no model has it: refused, naming the key, by the typed merge
        if not record:
            warn_once(
                f"reward.{key}: warning: skipped: {source} sets it, but reward.name={name} has no such key "
                f"(it is a key of {', '.join(sorted(owners[key]))})"
            )
        del reward[key]

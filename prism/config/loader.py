"""Loading a run's config: YAML layers and ``key=value`` overrides merged onto the typed schema.

A run's config is built from one or more YAML files (later files override earlier ones, so a method,
ablation or backbone overlay such as ``conf/agent/capql.yaml`` composes with any env file) and ``key=value``
dot-list overrides, merged onto the structured schema (:mod:`prism.config.schema`) — so unknown keys and wrong
types are caught by OmegaConf. The ``agent:`` node is typed by the backbone ``agent.name`` selects (its
registered config dataclass, :mod:`prism.plugins.registry`), so each backbone brings its own keys. The protocol is
applied (:mod:`prism.config.protocols`) and the cross-part rules checked (:mod:`prism.config.validation`)
before the config is returned.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from prism.config.agent_keys import foreign_key_hint, prepare_agent_layer, warn_once
from prism.config.files import RESOLVED_KEY, RUN_LEVEL_KEYS, check_node_types, load_layer
from prism.config.methods import derive_method, relabel_record
from prism.config.protocols import apply_protocol
from prism.config.reward_keys import (
    foreign_reward_key_hint,
    prepare_reward_layer,
    reward_config_class,
    selected_reward,
)
from prism.config.schema import DEFAULT_AGENT, RunConfig
from prism.config.validation import resolve_env_spec, resolve_spec_defaults, validate
from prism.core.errors import ConfigError

if TYPE_CHECKING:
    from prism.envs import EnvSpec


def _one_line(err: OmegaConfBaseException) -> str:
    """OmegaConf errors are multi-line; keep the key and the first line of the message."""
    key = err.full_key
    message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"{key}: {message}" if key else message


def load_config(
    files: Sequence[str | Path], overrides: Sequence[str] = (), *, record: bool = False
) -> RunConfig:
    """Merge ``files`` (in order) and dot-list ``overrides`` onto the schema; validate; return dataclasses.

    Two passes: the layers are first merged without a schema only to read ``agent.name`` (default
    :data:`DEFAULT_AGENT`); the schema's ``agent`` node is then typed as that backbone's config dataclass and
    everything is merged onto it, so ``agent.*`` keys the chosen backbone does not have are refused
    (``agent.foo: Key 'foo' not in 'CAPQLConfig'``) and its own keys get its defaults and checks. In config
    files (not overrides), a key of another registered backbone (``symreg_lambda`` of a method overlay on a
    backbone without SymReg) is skipped with a one-line warning instead (:mod:`prism.config.agent_keys`).

    A config that leaves ``method`` out gets the derived name before interpolations resolve (so the default
    ``run_dir`` names it); ``record=True`` reads a run folder's own config.yaml, whose ``method`` may hold an
    arm label from before labels were split (:func:`load_run_config`).
    """
    layers: list[DictConfig] = []
    for file in files:
        layer = load_layer(Path(file))
        if RESOLVED_KEY in layer:  # a run folder's record of what it resolved: informational, never read
            del layer[RESOLVED_KEY]
        layers.append(layer)
    _warn_env_switch(files, layers)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"{item}: overrides take the form key=value")
    try:
        backbone = _selected_agent([*layers, OmegaConf.from_dotlist(list(overrides))])
        agent_class = agent_config_class(backbone)
        reward_name = selected_reward([*layers, OmegaConf.from_dotlist(list(overrides))])
        reward_class = reward_config_class(reward_name)
        for file, layer in zip(files, layers):
            prepare_agent_layer(layer, file, agent_class, backbone)
            prepare_reward_layer(layer, file, reward_class, reward_name, record=record)
        layers.append(OmegaConf.from_dotlist(list(overrides)))
        schema = OmegaConf.structured(RunConfig)
        schema.agent = OmegaConf.structured(agent_class)
        # reward.name types the reward node as agent.name types the agent's (prism.config.reward_keys).
        schema.reward = OmegaConf.structured(reward_class(name=reward_name))
        for source, layer in zip([*map(str, files), "overrides"], layers):
            check_node_types(layer, schema, source)
        merged = OmegaConf.merge(schema, *layers)
        spec = _merged_spec(merged)
        if merged.method is None:
            merged.method = derive_method(_spec_filled(merged, spec))
        config: RunConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as err:
        message = _one_line(err)
        full_key = str(err.full_key or "")
        moved = RUN_LEVEL_KEYS.get(full_key)
        if moved is not None:
            raise ConfigError(moved) from None
        hint = foreign_key_hint(full_key, agent_class) or foreign_reward_key_hint(full_key, reward_class)
        if hint:
            raise ConfigError(message + hint) from None
        if message.startswith("seeds"):  # e.g. `seeds[1]: Value 'a' could not be converted to Integer`
            raise ConfigError(f"seeds: must be a list of distinct integers >= 0 ({message})") from None
        raise ConfigError(message) from None
    except ValueError as err:  # a part's own __post_init__ check; its message starts with the key
        raise ConfigError(str(err).strip().splitlines()[0]) from None
    if spec is None:  # refused, naming the key, by the typed lookup (an unknown env, a bad env.spec)
        spec = resolve_env_spec(config)
    if record:
        config = relabel_record(
            config, lambda: spec.n_objectives, lambda: resolve_spec_defaults(config, spec)
        )
    if config.protocol != "equal":
        config = apply_protocol(config, spec)
    # The spec-derived defaults are filled once, here, after the protocol (which sets its own λ): from now on
    # agents, validation and the resolved: block read floats.
    config = resolve_spec_defaults(config, spec)
    validate(config, record=record)
    return config


def load_run_config(path: str | Path, overrides: Sequence[str] = ()) -> RunConfig:
    """A run folder's config.yaml (``prism evaluate``, ``--resume``, :func:`prism.load_run`): as
    :func:`load_config`, and a ``method`` written before labels were split (an arm name such as ``e-prism``,
    or a built-in name the run's keys contradict) is read as ``method_label`` with the method derived
    (:func:`prism.config.methods.relabel_record`), so every run folder prism has written still loads."""
    return load_config([path], overrides, record=True)


def _warn_env_switch(files: Sequence[str | Path], layers: Sequence[DictConfig]) -> None:
    """Warn when a later config file sets another ``env.id`` than an earlier one (``conf/walker.yaml
    conf/quickstart.yaml`` trains on hopper): composing two env files is almost always meant as "this env at
    that budget", which the budget overlays (``conf/budget/``) are for."""
    first: tuple[str, Any] | None = None
    for file, layer in zip(files, layers):
        try:
            env_id = OmegaConf.select(layer, "env.id", default=None, throw_on_missing=False)
        except OmegaConfBaseException:  # `env: 3`: refused, naming the key, by the typed merge
            continue
        if not isinstance(env_id, str):
            continue
        if first is not None and env_id != first[1]:
            warn_once(
                f"env.id: warning: {file} sets {env_id} over {first[1]} from {first[0]}, so the run is on "
                f"{env_id}; for {first[1]} at another budget use a budget overlay (conf/budget/tiny.yaml, "
                "small.yaml) instead of a second env file"
            )
        first = (str(file), env_id)


def _merged_spec(merged: DictConfig) -> EnvSpec | None:
    """The env spec of the merged layers, looked up once per load (deriving an unregistered env's spec builds
    the env); ``None`` when it cannot be resolved, which the typed lookup then reports in one line."""
    from prism.envs import resolve_env_spec as resolve

    try:
        overrides = OmegaConf.to_container(merged.env.spec, resolve=True) if merged.env.spec else None
        with warnings.catch_warnings():
            # building a derived env's spec may warn; validate() says what matters
            warnings.simplefilter("ignore")
            return resolve(str(merged.env.id), overrides)
    except Exception:  # an unknown env, a bad env.spec: refused, naming the key, by resolve_env_spec()
        return None


def _spec_filled(merged: DictConfig, spec: EnvSpec | None) -> DictConfig:
    """The merged config as the method is derived from it: a null ``agent.symreg_lambda`` filled with the
    spec's λ (0 on an env without a symmetry table, where ReSymNet is then ``wo_loss``), as the typed config
    will hold it; the merged config itself, whose interpolations still name the method, is left as it is."""
    from prism.agents.symmetry import symreg_lambda
    from prism.config.methods import SYMREG_KEY

    if spec is None or SYMREG_KEY not in merged.agent or merged.agent[SYMREG_KEY] is not None:
        return merged
    return OmegaConf.merge(merged, {"agent": {SYMREG_KEY: symreg_lambda(None, spec)}})


def _selected_agent(layers: Sequence[DictConfig]) -> str:
    """``agent.name`` of the merged layers, read before the schema is known (default :data:`DEFAULT_AGENT`).

    Anything odd (layers that do not merge, a name that is not a string) falls back to the default: the
    typed merge that follows then reports it against the schema, naming the key."""
    try:
        name = OmegaConf.select(OmegaConf.merge(*layers), "agent.name", default=DEFAULT_AGENT)
    except (OmegaConfBaseException, TypeError):  # TypeError: a list merged onto a mapping (`env=[1]`)
        return DEFAULT_AGENT
    return name if isinstance(name, str) else DEFAULT_AGENT


def agent_config_class(name: str, key: str = "agent.name") -> type:
    """The config dataclass of the backbone ``name`` (registered, or a class path's ``config_class``)."""
    from prism.plugins.registry import AGENTS

    config_class = AGENTS.entry(key, name).config_class(key)
    if not (isinstance(config_class, type) and dataclasses.is_dataclass(config_class)):
        raise ConfigError(f"{key}: the config class of agent {name!r} is not a dataclass ({config_class!r})")
    if not any(f.name == "name" for f in dataclasses.fields(config_class)):
        raise ConfigError(f"{key}: the config class {config_class.__name__} of {name!r} has no `name` field")
    return config_class

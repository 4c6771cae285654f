"""Plug-in registries: one entry per plug-in, carrying everything prism needs to know about it.

Four kinds of plug-in are chosen in a run config by name:

- a **backbone** (``agent.name``, :data:`AGENTS`): an :class:`AgentEntry` = the LightningModule factory and
  the config dataclass of its ``agent.*`` keys (so ``agent.name=<x>`` selects ``<x>``'s own keys);
- a **reward method** (``reward.name``, :data:`REWARDS`): a :class:`RewardEntry` = the shaper factory and
  the name of the learned reward model it needs (``None``: no collection or fit phase);
- a **reward model** (:data:`REWARD_MODELS`): a :class:`RewardModelEntry` = its config dataclass, how to fit
  one from a segment store and how to load one from a checkpoint;
- an **env spec** (``env.id``): registered in :mod:`prism.envs` (``prism.envs.registered_env_ids``), which
  also derives a spec for any gymnasium multi-objective env; not repeated here.

Plug-ins are registered through the Python packaging entry-point group ``prism.plugins``
(:data:`PLUGIN_GROUP`): on the first lookup the registry loads every entry point of that group, once. Each
names a function called with no arguments (``package.module:register``) or a module whose import registers
(``package.module``). prism's own pyproject declares ``prism = "prism.plugins:register"`` (the built-ins,
each registered exactly once); a third-party package declares its own entry in its pyproject, so installing
it makes its plug-ins known without touching prism (docs/ARCHITECTURE.md, "Adding a reward model / a
backbone"). The registry imports no plug-in module itself, so there is no registry → plugins → registry
import circle. Factories may be given as class paths (``package.module:Name``,
``package.module:Class.attribute``) so that registering a plug-in imports nothing heavy.

Class paths also work in the config itself, for plug-ins that live outside prism:

- ``agent.name=package.module:MyAgent``: the class's ``config_class`` attribute is the dataclass of its
  ``agent.*`` keys (a subclass of :class:`~prism.agents.capql.CAPQLModule` inherits ``CAPQLConfig``); a class
  without one is refused at config load (there is no silent fallback: prism could not know its keys).
- ``reward.name=package.module:MyShaper``: built with the keywords ``(sparse_channel=, model=, seed=)``; a
  class with ``needs_model = True`` gets the reward model named by its ``reward_model`` attribute
  (default ``resymnet``) fitted and installed after every fit.

A class path is imported as ``python -m`` would import it (the current folder is tried last, so
``agent.name=myplug:MyAgent`` works for a ``myplug.py`` in the folder the command runs from).
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Generic, TypeVar

from prism.core.errors import ConfigError

Target = Callable[..., Any] | type | str
"""A factory or class, or its class path (imported on first use)."""

DEFAULT_REWARD_MODEL = "resymnet"
"""The reward model a class-path shaper with ``needs_model = True`` gets unless it names another one."""


def resolve(key: str, kind: str, target: Target) -> Any:
    """``target`` itself, or the object its class path names (``module:attr.attr`` or ``module.attr``).

    ``key`` and ``kind`` only word the :class:`~prism.config.ConfigError` raised when it cannot be imported.
    """
    if not isinstance(target, str):
        return target
    if ":" in target:
        module_name, _, attrs = target.partition(":")
    else:
        module_name, _, attrs = target.rpartition(".")
    try:
        obj: Any = _import_module(module_name)
        for attr in attrs.split("."):
            obj = getattr(obj, attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"{key}: cannot import {kind} class path {target!r} ({err})") from None
    return obj


def _import_module(name: str) -> Any:
    """``importlib.import_module(name)``, retried once with the current folder on ``sys.path`` (appended)
    when the top-level module is not found: the folder a command runs from holds plug-ins, as with
    ``python -m``."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        cwd = os.getcwd()
        if err.name != name.partition(".")[0] or cwd in sys.path:
            raise
        sys.path.append(cwd)
        importlib.invalidate_caches()
        return importlib.import_module(name)


def is_class_path(name: str) -> bool:
    """Whether a config value names a plug-in by class path rather than by registered name."""
    return "." in name or ":" in name


@dataclass(frozen=True)
class AgentEntry:
    """A backbone: ``factory(config, spec, env_factory, shapers, *, seeds, sparse_channel, target_env_steps)``
    builds the LightningModule (see :class:`prism.agents.contract.PopulationAgent`); ``config`` is the
    dataclass of its ``agent.*`` keys (it must have a ``name`` field, the selector)."""

    name: str
    factory: Target
    config: Target

    def agent_class(self, key: str = "agent.name") -> Callable[..., Any]:
        return resolve(key, "agent", self.factory)

    def config_class(self, key: str = "agent.name") -> type:
        return resolve(key, "agent config", self.config)

    @classmethod
    def from_class_path(cls, key: str, name: str) -> AgentEntry:
        factory = resolve(key, "agent", name)
        config = getattr(factory, "config_class", None)
        if config is None:
            raise ConfigError(
                f"{key}: agent class path {name!r} has no `config_class` attribute (the dataclass of its "
                "agent.* keys); give the class one or register the agent (entry-point group prism.plugins)"
            )
        return cls(name, factory, config)


@dataclass(frozen=True)
class RewardEntry:
    """A reward method: ``shaper(*, sparse_channel, model, seed)`` builds one member's shaper (``model`` is
    ``None`` at build time; the loop assigns ``shaper.model`` after every fit); ``model`` names the
    :data:`REWARD_MODELS` entry the method needs (``None``: no learned model, hence no collection or fit)."""

    name: str
    shaper: Target
    model: str | None = None

    @property
    def needs_model(self) -> bool:
        return self.model is not None

    def shaper_factory(self, key: str = "reward.name") -> Callable[..., Any]:
        return resolve(key, "reward redistribution", self.shaper)

    @classmethod
    def from_class_path(cls, key: str, name: str) -> RewardEntry:
        shaper = resolve(key, "reward redistribution", name)
        _check_shaper_factory(key, name, shaper)
        model = (
            getattr(shaper, "reward_model", DEFAULT_REWARD_MODEL)
            if getattr(shaper, "needs_model", False)
            else None
        )
        return cls(name, shaper, model)


SHAPER_KEYWORDS = ("sparse_channel", "model", "seed")
"""The keywords a run builds each member's shaper with."""


def _check_shaper_factory(key: str, name: str, shaper: Any) -> None:
    """Refuse, at config load, a class path that cannot build a shaper: not callable, a class without
    ``push``/``reset`` (a reward model's class, say), or one that does not take :data:`SHAPER_KEYWORDS`."""
    usage = (
        "give a registered reward method (prism list) or a shaper's class path (a class with push() and "
        f"reset(), built with {', '.join(f'{k}=' for k in SHAPER_KEYWORDS)})"
    )
    if not callable(shaper):
        raise ConfigError(f"{key}: {name!r} is a {type(shaper).__name__}, not a reward shaper; {usage}")
    if isinstance(shaper, type):
        missing = [method for method in ("push", "reset") if not callable(getattr(shaper, method, None))]
        if missing and callable(getattr(shaper, "predict", None)):
            raise ConfigError(
                f"{key}: {name!r} is a reward model, not a reward shaper; give the name the model is "
                "registered under (prism list), which shapes with it (docs/add_a_reward_model.md)"
            )
        if missing:
            lacks = " or ".join(f"{method}()" for method in missing)
            raise ConfigError(f"{key}: {name!r} is not a reward shaper (it has no {lacks}); {usage}")
    try:
        inspect.signature(shaper).bind(**dict.fromkeys(SHAPER_KEYWORDS))
    except TypeError as err:
        raise ConfigError(f"{key}: {name!r} cannot be built as a reward shaper ({err}); {usage}") from None
    except ValueError:  # no signature to read (a builtin): left to the call
        pass


@dataclass(frozen=True)
class RewardModelEntry:
    """A learned reward model: how to fit one on a :class:`~prism.data.segments.SegmentStore` and how to
    rebuild one from its ``to_dict()`` (``load(dict) -> model``, for checkpoints).

    The fit is given in one of two forms (exactly one): ``fitter``, a
    :class:`~prism.reward.fitting.fitter.RewardFitter` returning the model and its summary together (it takes the
    run's logger, callbacks, snapshots inside the fit and ``init`` for ``reward.warm_start``), or ``fit``, a
    plain ``fit(store, reward_config, *, logger, seed, device) -> model``. A model is a
    :class:`~prism.reward.model.RewardModel` (docs/add_a_reward_model.md).
    """

    name: str
    load: Target
    fit: Target | None = None
    """A plain fit ``fit(store, reward_config, *, logger, seed, device) -> model`` (a plug-in's)."""
    fitter: Target | None = None
    """A :class:`~prism.reward.fitting.fitter.RewardFitter` (``-> FittedReward(model, summary)``)."""
    population_fitter: Target | None = None
    """Optional :class:`~prism.reward.fitting.fitter.PopulationFitter`: every member's model of a population in one go
    (``reward.stacked_fit``), equal to ``fitter`` per store."""
    next_obs: bool = False
    """The model reads each step's next observation (RRD's ``r̂(s, a, s')``): the loop's segment stores keep
    them (:class:`~prism.data.segments.SegmentStore` ``next_obs=True``) and its models read them."""
    config: Target = "prism.reward.config:RewardConfig"  # the dataclass of its reward.* keys

    def __post_init__(self) -> None:
        if (self.fit is None) == (self.fitter is None):
            raise ValueError(f"reward model {self.name!r}: give exactly one of fit= and fitter=")

    def fit_fn(self, key: str = "reward.name") -> Callable[..., Any]:
        """The plain ``fit`` (:func:`prism.reward.fitting.fitter.reward_fitter` gives either form as a fitter)."""
        if self.fit is None:
            raise ValueError(f"reward model {self.name!r} is registered with a fitter, not a plain fit")
        return resolve(key, "reward model fit", self.fit)

    def fitter_fn(self, key: str = "reward.name") -> Callable[..., Any]:
        if self.fitter is None:
            raise ValueError(f"reward model {self.name!r} is registered with a plain fit, not a fitter")
        return resolve(key, "reward model fitter", self.fitter)

    def population_fitter_fn(self, key: str = "reward.name") -> Callable[..., Any] | None:
        if self.population_fitter is None:
            return None
        return resolve(key, "reward model population fitter", self.population_fitter)

    def load_fn(self, key: str = "reward.name") -> Callable[..., Any]:
        return resolve(key, "reward model loader", self.load)

    def config_class(self, key: str = "reward.name") -> type:
        return resolve(key, "reward model config", self.config)

    @classmethod
    def from_class_path(cls, key: str, name: str) -> RewardModelEntry:  # registered by name only
        raise ConfigError(f"{key}: reward model {name!r}: register it by name (docs/add_a_reward_model.md)")


E = TypeVar("E", AgentEntry, RewardEntry, RewardModelEntry)

PLUGIN_GROUP = "prism.plugins"
"""The entry-point group plug-ins register through (prism's own pyproject declares the built-ins there)."""

PRISM_DISTRIBUTION = "prism-morl"
"""prism's distribution name: its entry point is loaded first, and its absence means stale metadata."""

_PLUGINS_LOADED = False
_PLUGINS_ERROR: ConfigError | None = None
_PLUGINS_LOCK = threading.RLock()
_LOADING: str | None = None
"""The distribution whose entry point is being loaded (``None`` outside :func:`load_plugins`): the origin
recorded for each name it registers, so that a name registered twice names both distributions."""


def _dist_name(ep: metadata.EntryPoint) -> str:
    """The entry point's distribution name, normalised (PEP 503: ``prism_morl`` is ``prism-morl``)."""
    return _normalise(ep.dist.name if ep.dist is not None else "")


PLUGINS_ENV = "PRISM_PLUGINS"
"""Environment variable: comma-separated distributions whose ``prism.plugins`` entry points are loaded
(prism's own always is); unset or empty: every installed one. prism's tests set it to ``prism-morl``, so they
do not depend on what else is installed; a user may set it to rule a plug-in out."""


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def _loaded_distributions() -> set[str] | None:
    """The distributions :data:`PLUGINS_ENV` names (with prism's own), or ``None``: all of them."""
    value = os.environ.get(PLUGINS_ENV, "").strip()
    if not value:
        return None
    return {_normalise(name) for name in value.split(",") if name.strip()} | {PRISM_DISTRIBUTION}


def _entry_points() -> list[metadata.EntryPoint]:
    """The group's entry points (of the distributions :data:`PLUGINS_ENV` allows), prism's own first, then by
    distribution and name; duplicates (the same distribution seen twice on ``sys.path``) once."""
    seen, unique = set(), []
    allowed = _loaded_distributions()
    for ep in metadata.entry_points(group=PLUGIN_GROUP):
        dist = _dist_name(ep)
        if allowed is not None and dist not in allowed:
            continue
        if (dist, ep.name, ep.value) not in seen:
            seen.add((dist, ep.name, ep.value))
            unique.append((dist != PRISM_DISTRIBUTION, dist, ep.name, ep))
    return [ep for *_, ep in sorted(unique, key=lambda item: item[:3])]


def load_plugins() -> None:
    """Load every entry point of :data:`PLUGIN_GROUP` once (on the first registry lookup).

    An entry point names a function (called with no arguments) or a module (its import registers). One that
    fails to load is a :class:`ConfigError` naming it, raised again on every later lookup."""
    global _PLUGINS_LOADED, _PLUGINS_ERROR, _LOADING
    with _PLUGINS_LOCK:
        if _PLUGINS_LOADED:
            if _PLUGINS_ERROR is not None:
                raise _PLUGINS_ERROR
            return
        _PLUGINS_LOADED = True
        eps = _entry_points()
        if not any(_dist_name(ep) == PRISM_DISTRIBUTION for ep in eps):
            _PLUGINS_ERROR = ConfigError(
                f"{PLUGIN_GROUP}: prism's built-in plug-ins are not registered (its entry point is missing "
                "from the installed metadata); reinstall prism: pip install -e ."
            )
            raise _PLUGINS_ERROR
        for ep in eps:
            _LOADING = ep.dist.name if ep.dist is not None else ep.value
            try:
                target = ep.load()
                if callable(target):
                    target()
            except ConfigError as err:  # already one line (e.g. two plug-ins with one name)
                _PLUGINS_ERROR = err
                raise
            except Exception as err:
                first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                dist = ep.dist.name if ep.dist is not None else "?"
                _PLUGINS_ERROR = ConfigError(
                    f"{PLUGIN_GROUP}: entry point {ep.name} = {ep.value} (from {dist}) failed to load: {first}"
                )
                raise _PLUGINS_ERROR from None
            finally:
                _LOADING = None


class Registry(Generic[E]):
    """Names → entries of one plug-in kind, with class-path entries and one-line errors naming the key."""

    def __init__(self, kind: str, entry_type: type[E]):
        self.kind = kind
        self.entry_type = entry_type
        self._entries: dict[str, E] = {}
        self._origins: dict[str, str | None] = {}  # who registered each name (None: a direct call)

    def register(self, name: str, **fields: Any) -> E:
        """Register one plug-in (fields of the entry type, e.g. ``factory=`` and ``config=`` for an agent).

        A name is registered once: registering it again raises (no silent fallbacks or overrides)."""
        origin = _LOADING
        if name in self._entries:
            first = self._origins.get(name)
            if origin is not None and first is not None:
                raise ConfigError(
                    f"{PLUGIN_GROUP}: {self.kind} {name!r} is registered by two plug-ins, {first} and {origin}; "
                    f"uninstall one, or list the distributions to load in {PLUGINS_ENV}"
                )
            raise ValueError(f"{self.kind} {name!r} is already registered (by {first or 'a direct call'})")
        if is_class_path(name):
            raise ValueError(f"{self.kind} name {name!r} must not look like a class path (no '.' or ':')")
        entry = self.entry_type(name, **fields)
        self._entries[name] = entry
        self._origins[name] = origin
        return entry

    def unregister(self, name: str) -> None:
        """Remove an entry (for tests that register a plug-in temporarily)."""
        self._entries.pop(name, None)
        self._origins.pop(name, None)

    def names(self) -> list[str]:
        load_plugins()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        load_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[E]:
        load_plugins()
        return iter(self._entries[name] for name in sorted(self._entries))

    def entry(self, key: str, name: str) -> E:
        """The entry for a registered ``name`` or a class path; ``key`` is the config key used in errors."""
        load_plugins()
        if name in self._entries:
            return self._entries[name]
        if is_class_path(name):
            return self.entry_type.from_class_path(key, name)
        from prism.core._text import did_you_mean

        known = self.names()
        raise ConfigError(
            f"{key}: unknown {self.kind} {name!r} (known: {', '.join(known)}){did_you_mean(name, known)}"
        )

    def check(self, key: str, name: str) -> None:
        """Raise if ``name`` cannot be resolved (registered names are not imported, class paths are)."""
        self.entry(key, name)


AGENTS: Registry[AgentEntry] = Registry("agent", AgentEntry)
REWARDS: Registry[RewardEntry] = Registry("reward redistribution", RewardEntry)
REWARD_MODELS: Registry[RewardModelEntry] = Registry("reward model", RewardModelEntry)

PREDICTED_SHAPER = "prism.reward.shapers:predicted_shaper"
"""The shaper of a learned reward model's method: the model's per-step prediction replaces the channel."""


def register_reward_model(
    name: str,
    *,
    load: Target,
    fit: Target | None = None,
    fitter: Target | None = None,
    shaper: Target = PREDICTED_SHAPER,
    population_fitter: Target | None = None,
    next_obs: bool = False,
    config: Target = "prism.reward.config:RewardConfig",
) -> None:
    """Register a learned reward model and the reward method of the same name that shapes with it.

    One call: ``REWARD_MODELS[name] = (fit or fitter, load)`` and ``REWARDS[name] = (shaper, model=name)``, so
    ``reward.name=<name>`` collects segments, fits the model every cycle and replaces the sparse channel by
    its per-step prediction (the shaper may be replaced, e.g. by one that post-processes the prediction).
    Give a plain ``fit`` or a ``fitter`` (:class:`RewardModelEntry`); ``next_obs``: the model reads ``s_{t+1}``
    (:attr:`RewardModelEntry.next_obs`); ``config``: the dataclass of its ``reward.*`` keys.
    """
    REWARD_MODELS.register(
        name, fit=fit, fitter=fitter, load=load, population_fitter=population_fitter, next_obs=next_obs,
        config=config,
    )  # fmt: skip
    REWARDS.register(name, shaper=shaper, model=name)

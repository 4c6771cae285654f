"""The typed config tree: one dataclass per part, composed into :class:`RunConfig`, loaded with OmegaConf.

A run's config is built from one or more YAML files (later files override earlier ones, so a method,
ablation or backbone overlay such as ``conf/agent/capql.yaml`` composes with any env file) and ``key=value``
dot-list overrides, merged onto the structured schema below — so unknown keys and wrong types are caught by
OmegaConf. The ``agent:`` node is typed by the backbone ``agent.name`` selects (its registered config
dataclass, :mod:`prism.registry`), so each backbone brings its own keys.

Validation happens once per rule: every dataclass checks its own fields in ``__post_init__`` (helpers in
:mod:`prism.checks`), and :func:`validate` checks only the rules that tie parts together (the env spec vs
``env.sparse_channel``, SymReg and the eval weight counts; the dense env vs the reward method; the agent
config vs the chosen backbone; a CUDA device vs this machine). Every failure is a :class:`ConfigError` with
a one-line message starting with the offending key.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from prism import checks
from prism.agent_keys import check_method_label, foreign_key_hint, prepare_agent_layer
from prism.agent_keys import warn_once as _warn_once
from prism.agents.config import CAPQLConfig
from prism.config_files import RESOLVED_KEY, RUN_LEVEL_KEYS, check_node_types, load_layer
from prism.config_files import same_run as same_run  # re-exported
from prism.config_files import to_yaml as to_yaml  # re-exported
from prism.devices import accelerator as accelerator  # re-exported
from prism.devices import check_cuda_device
from prism.devices import torch_device as torch_device  # re-exported
from prism.errors import ConfigError  # re-exported: the config's error type
from prism.evaluation.config import EvalConfig
from prism.protocols import PROTOCOLS, apply_protocol
from prism.reward.config import RewardConfig

DEFAULT_AGENT = "capql"
"""The backbone of a config that does not set ``agent.name``."""


@dataclass
class EnvConfig:
    """Which environment, which channel is sparse and how it is released (docs/method.md §2–§3)."""

    id: str = "mo-hopper-v5"
    """A prism env id (``prism.envs.registered_env_ids()``: the paper's four MuJoCo tasks, the toy env) or
    any gymnasium / mo-gymnasium id of a multi-objective env with a Box action space, whose spec prism
    derives from the env (``prism.envs.derive_env_spec``; no symmetry table). See docs/custom_env.md."""
    sparse_channel: int | None = None
    """Reward channel hidden by the sparse wrapper; ``None`` = the spec's default channel; negative values
    count from the end (``-1`` = the last channel, the control cost in every shipped env)."""
    p_rel: float = 0.0
    """Per-step probability of releasing the sparse channel early (0 = only at episode end)."""
    dense: bool = False
    """Train on the plain dense env (the oracle): no wrapper, no hidden channel."""
    spec: dict[str, Any] | None = None
    """:class:`prism.envs.EnvSpec` fields replacing those of the registered or derived spec one by one,
    e.g. ``{symmetric_obs: [...], symmetric_act: [...], symreg_lambda: 0.01}`` to give an unshipped env a
    reflection symmetry table, or ``{ref_point: [...]}``; ``null`` = the spec as registered / derived."""

    def __post_init__(self) -> None:
        # The range of sparse_channel depends on the env's objectives: a cross-part rule, in validate().
        checks.in_unit_interval("env.p_rel", self.p_rel)


@dataclass
class LoopConfig:
    """The PRISM loop (paper Algorithm 1, docs/method.md §5)."""

    initial_episodes: int = 1000
    """N: episodes collected with a uniform random policy before the first reward fit."""
    expert_episodes: int = 1000
    """E: episodes collected with the current policy before each refit (not after the last cycle)."""
    cycles: int = 2
    """IR: number of reward-fit + RL cycles."""
    steps_per_cycle: int = 100_000
    """M: env steps of RL per cycle (total RL steps = cycles × steps_per_cycle for every method)."""
    checkpoint_every: int = 10_000
    """Save the whole run state every this many env steps (and at every phase end)."""

    def __post_init__(self) -> None:
        checks.positive("loop.initial_episodes", self.initial_episodes)
        checks.non_negative("loop.expert_episodes", self.expert_episodes)
        checks.positive("loop.cycles", self.cycles)
        checks.positive("loop.steps_per_cycle", self.steps_per_cycle)
        checks.positive("loop.checkpoint_every", self.checkpoint_every)


@dataclass
class RunConfig:
    """Everything a ``prism fit`` run needs."""

    seed: int = 0
    """Seed for every RNG of the run (torch, numpy, envs, release draws, splits). Unused when ``seeds`` is set
    (a population's config.yaml then leaves it out)."""
    seeds: list[int] | None = None
    """A population run: train one independent member per seed in one process (takes precedence over
    ``seed``). ``run_dir`` then holds ``seed<N>/`` per member (the files a single run writes) and a
    ``summary.csv``; see docs/ARCHITECTURE.md for what depends on the population's composition."""
    device: str = "auto"
    """``auto`` (CUDA when available), ``cpu`` or ``cuda``."""
    run_dir: str = "runs/${env.id}/${method}/${prism_seed_dir:${seed},${seeds}}"
    """Output folder: config.yaml, eval.csv, TensorBoard events, checkpoints/ (interpolations resolved). The
    default ends in ``seed<N>`` for a single run and ``seeds<A>-<B>-…`` for a population (its members then
    write to ``seeds0-1-2/seed0/`` …), e.g. ``runs/mo-hopper-v5/prism/seed0``, ``runs/mo-hopper-v5/prism/seeds0-1-2``."""
    threads: int = 1
    """CPU threads for torch (``torch.set_num_threads``); 0 keeps torch's default. One thread is fastest for
    these small networks on a shared or 2-core machine, and lets parallel runs not fight over cores."""
    method: str = "prism"
    """A label for reports (oracle, baseline, prism, ablation names); behaviour comes from the keys below
    (``prism`` on a backbone without SymReg warns once: that run is shaping only)."""
    protocol: str = "equal"
    """``equal`` (every method the same RL steps and agent) or ``released`` (the authors' released code's
    budgets, λ and actor): :mod:`prism.protocols`, docs/method.md §8a."""
    figures: bool = True
    """Draw the TensorBoard figures (``reward/shaped_vs_true`` after each reward fit, ``eval/front`` and
    ``eval_final/front`` at each evaluation). Their rollouts use seed streams of their own, so switching
    them off saves time and never changes the numbers of a run."""
    env: EnvConfig = field(default_factory=EnvConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    agent: Any = field(default_factory=CAPQLConfig)
    """The backbone's own config dataclass, chosen by ``agent.name`` (:class:`~prism.agents.config.CAPQLConfig`
    for ``capql``); typed ``Any`` here because the loader types the node per backbone (see :func:`load_config`)."""
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        """The top-level fields' own checks (the parts check theirs; :func:`validate` the cross-part rules)."""
        checks.non_negative("seed", self.seed)
        if self.seeds is not None:
            seeds = list(self.seeds)
            if not seeds:
                raise ValueError("seeds: must list at least one seed (or leave seeds unset and use seed)")
            if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
                raise ValueError(f"seeds: must be a list of distinct integers >= 0, got {seeds}")
            duplicates = sorted({s for s in seeds if seeds.count(s) > 1})
            if duplicates:
                raise ValueError(f"seeds: every seed must be distinct, {duplicates} repeated in {seeds}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"device: expected auto, cpu or cuda, got {self.device!r}")
        if not self.run_dir:
            raise ValueError("run_dir: must be a non-empty path")
        checks.non_negative("threads", self.threads)
        checks.require(
            "protocol", self.protocol in PROTOCOLS, f"be one of {', '.join(PROTOCOLS)}", self.protocol
        )


def _one_line(err: OmegaConfBaseException) -> str:
    """OmegaConf errors are multi-line; keep the key and the first line of the message."""
    key = getattr(err, "full_key", None)
    message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"{key}: {message}" if key else message


def load_config(files: Sequence[str | Path], overrides: Sequence[str] = ()) -> RunConfig:
    """Merge ``files`` (in order) and dot-list ``overrides`` onto the schema; validate; return dataclasses.

    Two passes: the layers are first merged without a schema only to read ``agent.name`` (default
    :data:`DEFAULT_AGENT`); the schema's ``agent`` node is then typed as that backbone's config dataclass and
    everything is merged onto it, so ``agent.*`` keys the chosen backbone does not have are refused
    (``agent.foo: Key 'foo' not in 'CAPQLConfig'``) and its own keys get its defaults and checks. In config
    files (not overrides), a key of another registered backbone (``symreg_lambda`` of a method overlay on a
    backbone without SymReg) is skipped with a one-line warning instead (:mod:`prism.agent_keys`).
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
        for file, layer in zip(files, layers):
            prepare_agent_layer(layer, file, agent_class, backbone)
        layers.append(OmegaConf.from_dotlist(list(overrides)))
        schema = OmegaConf.structured(RunConfig)
        schema.agent = OmegaConf.structured(agent_class)
        for source, layer in zip([*map(str, files), "overrides"], layers):
            check_node_types(layer, schema, source)
        merged = OmegaConf.merge(schema, *layers)
        config: RunConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as err:
        message = _one_line(err)
        moved = RUN_LEVEL_KEYS.get(str(getattr(err, "full_key", "")))
        if moved is not None:
            raise ConfigError(moved) from None
        hint = foreign_key_hint(str(getattr(err, "full_key", "")), agent_class)
        if hint:
            raise ConfigError(message + hint) from None
        if message.startswith("seeds"):  # e.g. `seeds[1]: Value 'a' could not be converted to Integer`
            raise ConfigError(f"seeds: must be a list of distinct integers >= 0 ({message})") from None
        raise ConfigError(message) from None
    except ValueError as err:  # a part's own __post_init__ check; its message starts with the key
        raise ConfigError(str(err).strip().splitlines()[0]) from None
    if config.protocol != "equal":
        config = apply_protocol(config, resolve_env_spec(config))
    validate(config)
    return config


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
            _warn_once(
                f"env.id: warning: {file} sets {env_id} over {first[1]} from {first[0]}, so the run is on "
                f"{env_id}; for {first[1]} at another budget use a budget overlay (conf/budget/tiny.yaml, "
                "small.yaml) instead of a second env file"
            )
        first = (str(file), env_id)


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
    from prism.registry import AGENTS

    config_class = AGENTS.entry(key, name).config_class(key)
    if not (isinstance(config_class, type) and dataclasses.is_dataclass(config_class)):
        raise ConfigError(f"{key}: the config class of agent {name!r} is not a dataclass ({config_class!r})")
    if not any(f.name == "name" for f in dataclasses.fields(config_class)):
        raise ConfigError(f"{key}: the config class {config_class.__name__} of {name!r} has no `name` field")
    return config_class


def resolved_values(config: RunConfig, spec=None) -> dict[str, Any]:
    """What a run decides at start for the keys its config leaves ``null`` / ``auto``: the device, the hidden
    channel, SymReg's λ, the evaluation reset seed (per member seed in a population), the evaluation worker
    processes per protocol and torch's threads; with the prism version. Only the keys that apply are given."""
    import torch

    from prism import __version__
    from prism.evaluation.pool import planned_workers

    spec = spec if spec is not None else resolve_env_spec(config)
    out: dict[str, Any] = {"prism_version": __version__, "device": str(torch_device(config.device))}
    out["env.sparse_channel"] = sparse_channel(config, spec)
    if hasattr(config.agent, "symreg_lambda"):
        lam = config.agent.symreg_lambda
        out["agent.symreg_lambda"] = float(lam if lam is not None else spec.symreg_lambda)
    seeds = member_seeds(config)
    if config.seeds is None:
        out["eval.seed"] = config.eval.reset_seed(config.seed)
    else:
        out["eval.seed"] = {f"seed{s}": config.eval.reset_seed(s) for s in seeds}
    ev = config.eval
    out["eval.num_workers"] = {
        "periodic": planned_workers(spec, ev.num_workers, ev.num_weights * ev.episodes),
        "final": planned_workers(spec, ev.num_workers, ev.final.num_weights * ev.final.episodes),
    }
    out["threads"] = config.threads if config.threads > 0 else torch.get_num_threads()
    return out


def member_seeds(config: RunConfig) -> list[int]:
    """The seeds of a run's members: ``seeds`` for a population, else ``[seed]``."""
    return list(config.seeds) if config.seeds is not None else [config.seed]


def resolve_env_spec(config: RunConfig):
    """The :class:`EnvSpec` of the run: the registered one or one derived from the env itself, with the
    fields of the config's ``env.spec`` on top (see :func:`prism.envs.resolve_env_spec`)."""
    from prism.envs import SpecError
    from prism.envs import resolve_env_spec as resolve

    try:
        # Building an env to read its spaces may warn (gymnasium's Box precision notes, in colour): the spec
        # is all prism needs here, and a refused env must end in one line.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec = resolve(config.env.id, config.env.spec)
    except SpecError as err:
        raise ConfigError(str(err).strip().splitlines()[0]) from None
    except TypeError as err:
        raise ConfigError(f"env.spec: {err}") from None
    return spec


def _check_symmetry(config: RunConfig, spec) -> None:
    """SymReg (λ > 0) and the exactly equivariant actor need the env's reflection table (L_g, K_g).

    λ left at ``null`` takes the spec's value, which is 0 for an env without a table: the run (e.g. the
    PRISM method overlay on an unshipped env) then goes ahead as ReSymNet shaping without SymReg, with a
    one-line warning (logged once) saying so. An error would make the PRISM overlay unusable on such envs;
    silence would hide that the result is the "w/o loss" ablation.
    """
    from prism.envs.spec import SYMMETRY_HINT

    agent = config.agent
    mode = getattr(agent, "symmetry_mode", None)  # a backbone without symmetry keys has nothing to check
    if spec.has_symmetry or mode is None:
        return
    if mode == "exact":
        raise ConfigError(
            f"agent.symmetry_mode: exact needs a reflection symmetry table and {spec.id} has none; "
            f"{SYMMETRY_HINT} or set agent.symmetry_mode=regularise"
        )
    if mode == "regularise" and agent.symreg_lambda is not None and agent.symreg_lambda > 0:
        raise ConfigError(
            f"agent.symreg_lambda: {spec.id} has no reflection symmetry table; {SYMMETRY_HINT} "
            "or set agent.symreg_lambda=0"
        )
    if mode == "regularise" and agent.symreg_lambda is None:
        _warn_once(
            f"agent.symreg_lambda: warning: {spec.id} has no reflection symmetry table, so SymReg is off "
            f"(λ = 0) and {config.method} runs without it; {SYMMETRY_HINT} to turn it on"
        )


def sparse_channel(config: RunConfig, spec) -> int | None:
    """The hidden channel of the run (None for the dense oracle)."""
    if config.env.dense:
        return None
    if config.env.sparse_channel is None:
        return spec.sparse_channel
    return config.env.sparse_channel % spec.n_objectives


def validate(config: RunConfig) -> None:
    """Check the rules that tie parts of the config together (each part checked its own fields when it was
    built); raise :class:`ConfigError` naming the key."""
    from prism.registry import AGENTS, REWARDS

    spec = resolve_env_spec(config)
    channel, n = config.env.sparse_channel, spec.n_objectives
    if channel is not None and not -n <= channel < n:
        raise ConfigError(
            f"env.sparse_channel: {channel} is out of range for {spec.id} ({n} objectives: 0..{n - 1}, or -{n}..-1)"
        )
    if config.device.startswith("cuda"):
        check_cuda_device(config.device)
    max_members = getattr(type(config.agent), "max_members", None)
    if config.seeds is not None and max_members is not None and len(config.seeds) > max_members:
        raise ConfigError(
            f"seeds: agent.name={config.agent.name} trains at most {max_members} member(s) per process, got "
            f"{len(config.seeds)} seeds; run one process per seed (tools/reproduce.py --per-seed-processes)"
        )

    REWARDS.check("reward.name", config.reward.name)
    if config.env.dense and config.reward.name != "none":
        raise ConfigError(
            f"reward.name: the dense env (env.dense=true, the oracle) has no hidden channel to "
            f"redistribute; use reward.name=none, got {config.reward.name!r}"
        )

    # The agent node must be the chosen backbone's own config (it is when the loader built it; a config
    # built in Python may pair a name with another backbone's dataclass).
    config_class = AGENTS.entry("agent.name", config.agent.name).config_class()
    if not isinstance(config.agent, config_class):
        raise ConfigError(
            f"agent.name: {config.agent.name!r} takes a {config_class.__name__}, "
            f"got a {type(config.agent).__name__}"
        )
    _check_symmetry(config, spec)
    check_method_label(config)

    # The energy method behind the weight sets needs at least one direction per objective.
    ev = config.eval
    for key, count in (
        ("eval.num_weights", ev.num_weights),
        ("eval.final.num_weights", ev.final.num_weights),
        ("eval.eum_weights", ev.eum_weights),
    ):
        if count < n:
            raise ConfigError(
                f"{key}: must be at least the number of objectives ({n} for {spec.id}), got {count}"
            )

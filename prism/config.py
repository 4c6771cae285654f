"""The typed config tree: one dataclass per part, composed into :class:`RunConfig`, loaded with OmegaConf.

A run's config is built from one or more YAML files (later files override earlier ones, so a method or
ablation overlay composes with any env file) and ``key=value`` dot-list overrides, merged onto the
structured schema below — so unknown keys and wrong types are caught by OmegaConf — and then checked by
:func:`validate`, which raises :class:`ConfigError` with a one-line message naming the offending key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from prism.agents.config import AgentConfig
from prism.loop.evaluation import EvalConfig
from prism.reward.config import RewardConfig


class ConfigError(ValueError):
    """A bad config value; ``str(err)`` is one line that starts with the offending key."""


@dataclass
class EnvConfig:
    """Which environment, which channel is sparse and how it is released (SPEC §2–§3)."""

    id: str = "mo-hopper-v5"
    """Registered env id (see ``prism.envs.registered_env_ids()``), or the id of ``spec`` below."""
    sparse_channel: int | None = None
    """Reward channel hidden by the sparse wrapper; ``None`` = the spec's default channel; negative values
    count from the end (``-1`` = the last channel, the control cost in every shipped env)."""
    p_rel: float = 0.0
    """Per-step probability of releasing the sparse channel early (0 = only at episode end)."""
    dense: bool = False
    """Train on the plain dense env (the oracle): no wrapper, no hidden channel."""
    spec: dict[str, Any] | None = None
    """A full :class:`prism.envs.EnvSpec` for an env prism does not ship (same fields)."""


@dataclass
class LoopConfig:
    """The PRISM loop (paper Algorithm 1, SPEC §5)."""

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


@dataclass
class RunConfig:
    """Everything a ``prism fit`` run needs."""

    seed: int = 0
    """Seed for every RNG of the run (torch, numpy, envs, release draws, splits)."""
    device: str = "auto"
    """``auto`` (CUDA when available), ``cpu`` or ``cuda``."""
    run_dir: str = "runs/${env.id}/${method}/seed${seed}"
    """Output folder: config.yaml, eval.csv, TensorBoard events, checkpoints/ (interpolations resolved)."""
    threads: int = 1
    """CPU threads for torch (``torch.set_num_threads``); 0 keeps torch's default. One thread is fastest for
    these small networks on a shared or 2-core machine, and lets parallel runs not fight over cores."""
    method: str = "prism"
    """A label for reports (oracle, baseline, prism, ablation names); behaviour comes from the keys below."""
    env: EnvConfig = field(default_factory=EnvConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def _one_line(err: OmegaConfBaseException) -> str:
    """OmegaConf errors are multi-line; keep the key and the first line of the message."""
    key = getattr(err, "full_key", None)
    message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"{key}: {message}" if key else message


def load_config(files: Sequence[str | Path], overrides: Sequence[str] = ()) -> RunConfig:
    """Merge ``files`` (in order) and dot-list ``overrides`` onto the schema; validate; return dataclasses."""
    schema = OmegaConf.structured(RunConfig)
    layers: list[DictConfig] = []
    for file in files:
        path = Path(file)
        if not path.is_file():
            raise ConfigError(f"--config: file {str(path)!r} does not exist")
        try:
            layer = OmegaConf.load(path)
        except OSError as err:
            raise ConfigError(f"--config: cannot read {str(path)!r}: {err.strerror}") from None
        except Exception as err:  # YAML syntax errors come in several types
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConfigError(f"--config: {str(path)!r} is not valid YAML: {first}") from None
        if not isinstance(layer, DictConfig):
            raise ConfigError(f"--config: {str(path)!r} must hold a mapping of keys, not a list")
        layers.append(layer)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"{item}: overrides take the form key=value")
    try:
        merged = OmegaConf.merge(schema, *layers, OmegaConf.from_dotlist(list(overrides)))
        config: RunConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as err:
        raise ConfigError(_one_line(err)) from None
    except ValueError as err:  # a part's own __post_init__ check; its message starts with the key
        raise ConfigError(str(err).strip().splitlines()[0]) from None
    validate(config)
    return config


def to_yaml(config: RunConfig) -> str:
    """The resolved config as YAML (what a run folder's config.yaml holds)."""
    return OmegaConf.to_yaml(OmegaConf.structured(config))


def to_dict(config: RunConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def _positive(key: str, value: int | float) -> None:
    if value <= 0:
        raise ConfigError(f"{key}: must be positive, got {value}")


def _non_negative(key: str, value: int | float) -> None:
    if value < 0:
        raise ConfigError(f"{key}: must be >= 0, got {value}")


def resolve_env_spec(config: RunConfig):
    """The :class:`EnvSpec` of the run: the registered one, or the config's own ``env.spec``."""
    from prism.envs import EnvSpec, SpecError, get_env_spec

    try:
        if config.env.spec is not None:
            spec = EnvSpec.from_dict({"id": config.env.id, **config.env.spec})
        else:
            spec = get_env_spec(config.env.id)
    except SpecError as err:
        raise ConfigError(str(err)) from None
    except TypeError as err:
        raise ConfigError(f"env.spec: {err}") from None
    return spec


def sparse_channel(config: RunConfig, spec) -> int | None:
    """The hidden channel of the run (None for the dense oracle)."""
    if config.env.dense:
        return None
    if config.env.sparse_channel is None:
        return spec.sparse_channel
    return config.env.sparse_channel % spec.n_objectives


def _check_cuda_device(device: str) -> None:
    """``device: cuda`` (or ``cuda:N``) must name a GPU torch can use on this machine."""
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(
            f"device: {device!r} requested but CUDA is not available on this machine "
            f"(torch {torch.__version__}); use device=cpu or device=auto"
        )
    if ":" in device:
        index = device.split(":", 1)[1]
        count = torch.cuda.device_count()
        if not index.isdigit() or int(index) >= count:
            raise ConfigError(f"device: {device!r} is not one of this machine's {count} CUDA device(s)")


def validate(config: RunConfig) -> None:
    """Check the values OmegaConf's types cannot; raise :class:`ConfigError` naming the key."""
    from prism.registry import AGENTS, REWARDS

    spec = resolve_env_spec(config)
    channel, n = config.env.sparse_channel, spec.n_objectives
    if channel is not None and not -n <= channel < n:
        raise ConfigError(
            f"env.sparse_channel: {channel} is out of range for {spec.id} ({n} objectives: 0..{n - 1}, or -{n}..-1)"
        )
    if not 0.0 <= config.env.p_rel <= 1.0:
        raise ConfigError(f"env.p_rel: must lie in [0, 1], got {config.env.p_rel}")
    if config.device not in ("auto", "cpu", "cuda") and not config.device.startswith("cuda:"):
        raise ConfigError(f"device: expected auto, cpu or cuda, got {config.device!r}")
    if config.device.startswith("cuda"):
        _check_cuda_device(config.device)
    if not config.run_dir:
        raise ConfigError("run_dir: must be a non-empty path")
    _non_negative("seed", config.seed)
    _non_negative("threads", config.threads)
    _non_negative("reward.threads", config.reward.threads)

    loop = config.loop
    _positive("loop.cycles", loop.cycles)
    _positive("loop.steps_per_cycle", loop.steps_per_cycle)
    _positive("loop.checkpoint_every", loop.checkpoint_every)
    _non_negative("loop.expert_episodes", loop.expert_episodes)
    _positive("loop.initial_episodes", loop.initial_episodes)

    REWARDS.check("reward.name", config.reward.name)
    AGENTS.check("agent.name", config.agent.name)
    if config.env.dense and config.reward.name != "none":
        raise ConfigError(
            f"reward.name: the dense env (env.dense=true, the oracle) has no hidden channel to "
            f"redistribute; use reward.name=none, got {config.reward.name!r}"
        )
    _positive("reward.ensemble_size", config.reward.ensemble_size)
    _positive("reward.max_epochs", config.reward.max_epochs)
    _positive("reward.batch_size", config.reward.batch_size)
    if not 0.0 < config.reward.val_fraction < 1.0:
        raise ConfigError(f"reward.val_fraction: must lie in (0, 1), got {config.reward.val_fraction}")

    agent = config.agent
    if agent.seed is not None:
        raise ConfigError("agent.seed: set the run's top-level `seed` instead (it seeds the agent too)")
    if agent.device != "auto":
        raise ConfigError(
            "agent.device: set the run's top-level `device` instead (one device for the whole run)"
        )
    _non_negative("agent.learning_starts", agent.learning_starts)
    _positive("agent.batch_size", agent.batch_size)
    _positive("agent.buffer_size", agent.buffer_size)
    if agent.symreg_lambda is not None:
        _non_negative("agent.symreg_lambda", agent.symreg_lambda)
    if not 0.0 < agent.gamma <= 1.0:
        raise ConfigError(f"agent.gamma: must lie in (0, 1], got {agent.gamma}")

    ev = config.eval
    _positive("eval.every", ev.every)
    _positive("eval.num_weights", ev.num_weights)
    _positive("eval.episodes", ev.episodes)

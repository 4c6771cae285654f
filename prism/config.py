"""The typed config tree: one dataclass per part, composed into :class:`RunConfig`, loaded with OmegaConf.

A run's config is built from one or more YAML files (later files override earlier ones, so a method or
ablation overlay composes with any env file) and ``key=value`` dot-list overrides, merged onto the
structured schema below — so unknown keys and wrong types are caught by OmegaConf — and then checked by
:func:`validate`, which raises :class:`ConfigError` with a one-line message naming the offending key.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from prism.agents.config import AgentConfig
from prism.evaluation.config import EvalConfig
from prism.reward.config import RewardConfig


class ConfigError(ValueError):
    """A bad config value; ``str(err)`` is one line that starts with the offending key."""


@dataclass
class EnvConfig:
    """Which environment, which channel is sparse and how it is released (SPEC §2–§3)."""

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
    seeds: list[int] | None = None
    """A population run: train one independent member per seed in one process (takes precedence over
    ``seed``). ``run_dir`` then holds ``seed<N>/`` per member (the files a single run writes) and a
    ``summary.csv``; see docs/ARCHITECTURE.md for what depends on the population's composition."""
    device: str = "auto"
    """``auto`` (CUDA when available), ``cpu`` or ``cuda``."""
    run_dir: str = "runs/${env.id}/${method}/seed${seed}"
    """Output folder: config.yaml, eval.csv, TensorBoard events, checkpoints/ (interpolations resolved)."""
    threads: int = 1
    """CPU threads for torch (``torch.set_num_threads``); 0 keeps torch's default. One thread is fastest for
    these small networks on a shared or 2-core machine, and lets parallel runs not fight over cores."""
    method: str = "prism"
    """A label for reports (oracle, baseline, prism, ablation names); behaviour comes from the keys below."""
    figures: bool = True
    """Draw the TensorBoard figures (``reward/shaped_vs_true`` after each reward fit, ``eval/front`` and
    ``eval_final/front`` at each evaluation). Their rollouts use seed streams of their own, so switching
    them off saves time and never changes the numbers of a run."""
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
        message = _one_line(err)
        if message.startswith("seeds"):  # e.g. `seeds[1]: Value 'a' could not be converted to Integer`
            raise ConfigError(f"seeds: must be a list of distinct integers >= 0 ({message})") from None
        raise ConfigError(message) from None
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


_LOG = logging.getLogger("prism.config")
_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    """Log a one-line config warning (starting with the key) once per process: a config that runs, but
    probably not as its author expects. With no logging set up it reaches stderr as the bare line."""
    if message not in _WARNED:
        _WARNED.add(message)
        _LOG.warning(message)


def member_seeds(config: RunConfig) -> list[int]:
    """The seeds of a run's members: ``seeds`` for a population, else ``[seed]``."""
    return list(config.seeds) if config.seeds is not None else [config.seed]


def resolve_env_spec(config: RunConfig):
    """The :class:`EnvSpec` of the run: the registered one or one derived from the env itself, with the
    fields of the config's ``env.spec`` on top (see :func:`prism.envs.resolve_env_spec`)."""
    from prism.envs import SpecError
    from prism.envs import resolve_env_spec as resolve

    try:
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

    if spec.has_symmetry:
        return
    agent = config.agent
    if agent.symmetry_mode == "exact":
        raise ConfigError(
            f"agent.symmetry_mode: exact needs a reflection symmetry table and {spec.id} has none; "
            f"{SYMMETRY_HINT} or set agent.symmetry_mode=regularise"
        )
    if agent.symmetry_mode == "regularise" and agent.symreg_lambda is not None and agent.symreg_lambda > 0:
        raise ConfigError(
            f"agent.symreg_lambda: {spec.id} has no reflection symmetry table; {SYMMETRY_HINT} "
            "or set agent.symreg_lambda=0"
        )
    if agent.symmetry_mode == "regularise" and agent.symreg_lambda is None:
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
    if config.seeds is not None:
        seeds = list(config.seeds)
        if not seeds:
            raise ConfigError("seeds: must list at least one seed (or leave seeds unset and use seed)")
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
            raise ConfigError(f"seeds: must be a list of distinct integers >= 0, got {seeds}")
        duplicates = sorted({s for s in seeds if seeds.count(s) > 1})
        if duplicates:
            raise ConfigError(f"seeds: every seed must be distinct, {duplicates} repeated in {seeds}")
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
    _check_symmetry(config, spec)
    if not 0.0 < agent.gamma <= 1.0:
        raise ConfigError(f"agent.gamma: must lie in (0, 1], got {agent.gamma}")

    ev = config.eval
    _positive("eval.every", ev.every)
    _positive("eval.num_weights", ev.num_weights)
    _positive("eval.episodes", ev.episodes)
    _positive("eval.final.num_weights", ev.final.num_weights)
    _positive("eval.final.episodes", ev.final.episodes)
    if ev.seed is not None:
        _non_negative("eval.seed", ev.seed)
    # The energy method behind the weight sets needs at least one direction per objective.
    for key, count in (
        ("eval.num_weights", ev.num_weights),
        ("eval.final.num_weights", ev.final.num_weights),
        ("eval.eum_weights", ev.eum_weights),
    ):
        if count < n:
            raise ConfigError(
                f"{key}: must be at least the number of objectives ({n} for {spec.id}), got {count}"
            )

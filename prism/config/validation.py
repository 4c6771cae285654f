"""The rules that tie parts of a run's config together, and the env-spec lookups they need.

Each part's dataclass checked its own fields when it was built (:mod:`prism.config.schema`); :func:`validate`
checks the env spec vs ``env.sparse_channel``, SymReg and the eval weight counts; the dense env vs the reward
method; the agent config vs the chosen backbone; a CUDA device vs this machine. Every failure is a
:class:`~prism.core.errors.ConfigError` with a one-line message starting with the offending key.
"""

from __future__ import annotations

import dataclasses
import warnings

from prism.config.agent_keys import check_method_label, warn_once
from prism.config.methods import SYMREG_KEY, check_method, derive_method, run_label
from prism.config.schema import RunConfig
from prism.core.devices import check_cuda_device, torch_device
from prism.core.errors import ConfigError


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


def resolve_spec_defaults(config: RunConfig, spec) -> RunConfig:
    """``config`` with the keys it leaves to the env spec filled in, named in ``spec_defaults`` (so that
    config.yaml still writes them ``null``): a null ``agent.symreg_lambda`` becomes the spec's λ
    (:func:`prism.agents.symmetry.symreg_lambda`), so agents, validation and the ``resolved:`` block read one
    float. Returns ``config`` itself when nothing is left null (λ set, or a backbone without SymReg), so
    calling it again changes nothing."""
    from prism.agents.symmetry import symreg_lambda

    agent = config.agent
    if getattr(agent, SYMREG_KEY, 0.0) is not None:
        return config
    filled = dataclasses.replace(agent, **{SYMREG_KEY: symreg_lambda(None, spec)})
    return dataclasses.replace(
        config, agent=filled, spec_defaults=(*config.spec_defaults, f"agent.{SYMREG_KEY}")
    )


def _check_symmetry(config: RunConfig, spec) -> None:
    """SymReg (λ > 0) and the exactly equivariant actor need the env's reflection table (L_g, K_g): refused
    by :func:`prism.agents.symmetry.check_symmetry_table`, the rule's one statement.

    λ left at ``null`` takes the spec's value, which is 0 for an env without a table: the run (e.g. the
    PRISM method overlay on an unshipped env) then goes ahead as ReSymNet shaping without SymReg, with a
    one-line warning (logged once) saying so. An error would make the PRISM overlay unusable on such envs;
    silence would hide that the result is the "w/o loss" ablation.
    """
    from prism.agents.symmetry import check_symmetry_table
    from prism.envs.spec import SYMMETRY_HINT

    agent = config.agent
    if not hasattr(agent, SYMREG_KEY) and not hasattr(agent, "symmetry_mode"):
        return  # a backbone without symmetry keys has nothing to check
    mode = getattr(agent, "symmetry_mode", "regularise")
    lam = resolve_spec_defaults(config, spec).agent.symreg_lambda if hasattr(agent, SYMREG_KEY) else 0.0
    try:
        check_symmetry_table(spec, lam, mode)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    from_spec = getattr(agent, SYMREG_KEY, 0.0) is None or f"agent.{SYMREG_KEY}" in config.spec_defaults
    if spec.has_symmetry or mode != "regularise" or not from_spec:
        return
    derived = derive_method(resolve_spec_defaults(config, spec))
    if derived in (config.method, run_label(config)):  # naming what the run is: "without SymReg" itself
        said = f"the run is filed as {run_label(config)}"
    else:  # e.g. method: prism from conf/method/prism.yaml: the label stays, the run is `derived`
        said = f"the run, labelled {run_label(config)}, trains as {derived} (leave method out to file it so)"
    warn_once(
        f"agent.symreg_lambda: warning: {spec.id} has no reflection symmetry table, so SymReg is off "
        f"(λ = 0) and {said}; {SYMMETRY_HINT} to turn it on"
    )


def sparse_channel(config: RunConfig, spec) -> int | None:
    """The hidden channel of the run (None for the dense oracle)."""
    if config.env.dense:
        return None
    if config.env.sparse_channel is None:
        return spec.sparse_channel
    return config.env.sparse_channel % spec.n_objectives


def validate(config: RunConfig, *, record: bool = False) -> None:
    """Check the rules that tie parts of the config together (each part checked its own fields when it was
    built); raise :class:`ConfigError` naming the key. ``record``: the config is a run folder's own, whose
    ``method_label`` may be a built-in name from before labels were split (never refused there)."""
    from prism.plugins.registry import AGENTS, REWARDS

    spec = resolve_env_spec(config)
    channel, n = config.env.sparse_channel, spec.n_objectives
    if channel is not None and not -n <= channel < n:
        raise ConfigError(
            f"env.sparse_channel: {channel} is out of range for {spec.id} ({n} objectives: 0..{n - 1}, or -{n}..-1)"
        )
    if config.device.startswith("cuda"):
        check_cuda_device(config.device)
    if config.reward.precision != "32-true":
        # Refused here, at load, not after hours of collection when the first fit starts.
        from prism.reward.fitting.fit import check_precision

        try:
            check_precision(config.reward.precision, torch_device(config.device))
        except ValueError as error:
            raise ConfigError(str(error)) from None
    max_members = type(config.agent).max_members
    if config.seeds is not None and max_members is not None and len(config.seeds) > max_members:
        raise ConfigError(
            f"seeds: agent.name={config.agent.name} trains at most {max_members} member(s) per process, got "
            f"{len(config.seeds)} seeds; run one process per seed (prism reproduce --per-seed-processes)"
        )

    REWARDS.check("reward.name", config.reward.name)
    if config.env.dense and config.reward.name != "none":
        raise ConfigError(
            f"reward.name: the dense env (env.dense=true, the oracle) has no hidden channel to "
            f"redistribute; use reward.name=none, got {config.reward.name!r}"
        )
    if not config.env.dense and config.env.p_rel >= 1.0:
        # Released at every step, the hidden channel is the dense reward: a reward model would be fitted to
        # what the agent already sees, and the run, filed as prism (or baseline), would be the oracle.
        raise ConfigError(
            f"env.p_rel: 1.0 releases the hidden channel at every step, so the env is dense and there is "
            f"nothing to redistribute (reward.name={config.reward.name}); for the dense oracle use "
            f"env.dense=true reward.name=none, else set env.p_rel below 1, got {config.env.p_rel!r}"
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
    # A config built in Python may leave λ null: judged as the loader would have filled it.
    check_method(resolve_spec_defaults(config, spec), record=record, n_objectives=n)
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

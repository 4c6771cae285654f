"""The typed config tree: one dataclass per part, composed into :class:`RunConfig`.

Every dataclass checks its own fields in ``__post_init__`` (helpers in :mod:`prism.core.checks`); the rules that
tie parts together are :func:`prism.config.validation.validate`'s. The parts' own dataclasses live with their
parts (:class:`~prism.agents.config.CAPQLConfig`, :class:`~prism.reward.config.RewardConfig`,
:class:`~prism.evaluation.config.EvalConfig`); this module holds the run-level ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prism.agents.config import CAPQLConfig, OffPolicyConfig
from prism.config.methods import DEFAULT_BACKBONE
from prism.core import checks
from prism.evaluation.config import EvalConfig
from prism.reward.config import ReSymNetConfig, RewardConfig

DEFAULT_AGENT = DEFAULT_BACKBONE
"""The backbone of a config that does not set ``agent.name``."""


PROTOCOLS = ("equal", "released")
"""The accepted values of the top-level ``protocol`` key (what each means: :mod:`prism.config.protocols`)."""


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
    """Per-step probability of releasing the sparse channel early (0 = only at episode end). 1 is refused
    unless ``env.dense=true``: released every step, the channel is dense (the oracle is ``env.dense=true``)."""
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
    fit_checkpoint_every_s: float | None = 600.0
    """During a reward fit, also save the whole run state, with the fit's progress, at the first epoch end
    after every this many seconds (0: every epoch; ``null``: never, and a fit killed half-way starts over).
    A resumed fit goes on from there and fits what the uninterrupted fit would have (bit for bit on a CPU):
    with the paper's E = 1000 and ≤ 1000 epochs a refit can take hours."""

    def __post_init__(self) -> None:
        checks.positive("loop.initial_episodes", self.initial_episodes)
        checks.non_negative("loop.expert_episodes", self.expert_episodes)
        checks.positive("loop.cycles", self.cycles)
        checks.positive("loop.steps_per_cycle", self.steps_per_cycle)
        checks.positive("loop.checkpoint_every", self.checkpoint_every)
        if self.fit_checkpoint_every_s is not None:
            checks.non_negative("loop.fit_checkpoint_every_s", self.fit_checkpoint_every_s)


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
    run_dir: str = (
        "runs/${env.id}/${prism_label:${method},${method_label},${agent.name},${reward.name},${reward.loss}}"
        "/${prism_seed_dir:${seed},${seeds}}"
    )
    """Output folder: config.yaml, eval.csv, TensorBoard events, checkpoints/ (interpolations resolved). The
    default ends in ``seed<N>`` for a single run and ``seeds<A>-<B>-…`` for a population (its members then
    write to ``seeds0-1-2/seed0/`` …), e.g. ``runs/mo-hopper-v5/prism/seed0``, ``runs/mo-hopper-v5/prism/seeds0-1-2``.
    A backbone other than CAPQL is named after the method: ``runs/mo-hopper-v5/prism-gpi_pd/seed0``, and so is
    ReSymNet's randomized fit (``reward.loss=randomized``): ``runs/mo-hopper-v5/prism-randomized/seed0``."""
    threads: int = 1
    """CPU threads for torch (``torch.set_num_threads``); 0 keeps torch's default. One thread is fastest for
    these small networks on a shared or 2-core machine, and lets parallel runs not fight over cores."""
    deterministic: bool = False
    """Make a CUDA run repeat bit for bit: when the run is built, ``torch.use_deterministic_algorithms(True)``
    with cuBLAS's fixed workspace (``CUBLAS_WORKSPACE_CONFIG=:4096:8`` unless already set) and cuDNN autotuning
    off (:func:`prism.core.devices.make_deterministic`). Off by default: CUDA's fastest kernels (atomic adds in
    ``index_add``/scatter, cuBLAS's workspace-dependent reductions) sum in a varying order, so two CUDA runs of
    one config drift apart; the key pins them at some cost in wall time (docs/benchmarks.md has both
    measured). A CPU run repeats bit for bit either way, and the key
    changes none of its numbers. The flag is process-wide and stays set after the run; set it before the
    process first uses CUDA (``prism fit`` does)."""
    method: str | None = None
    """The method the run is (:mod:`prism.config.methods`): a built-in name (``oracle``, ``baseline``,
    ``prism``, ``wo_loss``, ``uniform``, ``random``, ``rrd``, the ablations), which the keys below must agree
    with, or a plug-in reward model's name. Left out (``null``), it is derived from ``reward.name``,
    ``env.dense`` and ``agent.symreg_lambda``. Behaviour always comes from those keys; ``method`` only names it."""
    method_label: str | None = None
    """A label of your own for ``run_dir``, reports and ``summary.json`` (``prism-lr1e-3``); ``null``: the
    method's name. It may not be another built-in method's name."""
    protocol: str = "equal"
    """``equal`` (every method the same RL steps and agent) or ``released`` (the authors' released code's
    budgets, λ and actor): :mod:`prism.config.protocols`, docs/method.md §8a."""
    figures: bool = True
    """Draw the TensorBoard figures (``reward/shaped_vs_true`` after each reward fit, ``eval/front`` and
    ``eval_final/front`` at each evaluation). Their rollouts use seed streams of their own, so switching
    them off saves time and never changes the numbers of a run."""
    env: EnvConfig = field(default_factory=EnvConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    reward: RewardConfig = field(default_factory=ReSymNetConfig)
    """The reward model's config dataclass, chosen by ``reward.name`` (:class:`~prism.reward.config.ReSymNetConfig`
    for ``resymnet``; the shared keys alone for a method without a model): :mod:`prism.config.reward_keys`."""
    agent: OffPolicyConfig = field(default_factory=CAPQLConfig)
    """The backbone's own config dataclass, chosen by ``agent.name`` (:class:`~prism.agents.config.CAPQLConfig`
    for ``capql``), a subclass of the base :class:`~prism.agents.config.OffPolicyConfig`: the loader types the
    node per backbone (see :func:`load_config`)."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    spec_defaults: tuple[str, ...] = field(
        default=(), metadata={"omegaconf_ignore": True}, compare=False, repr=False
    )
    """Not a key: the dotted keys the config left ``null`` for the env spec to fill, which
    :func:`~prism.config.load_config` has filled (``agent.symreg_lambda``, then the spec's λ as a float).
    config.yaml writes them ``null``, as the config files said, so a run folder says what was asked for and
    its ``resolved:`` block what it became."""

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
        checks.one_of("protocol", self.protocol, PROTOCOLS)


def member_seeds(config: RunConfig) -> list[int]:
    """The seeds of a run's members: ``seeds`` for a population, else ``[seed]``."""
    return list(config.seeds) if config.seeds is not None else [config.seed]

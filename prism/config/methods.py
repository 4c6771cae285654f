"""Method names: what a run's ``method`` says it is, the name derived when it is left out, and ``method_label``.

``method`` is not a free label. A built-in name (:data:`BUILTIN_METHODS`: the paper's arms and ablations)
names a reward model, whether the env is dense, and whether SymReg is on; a run whose keys say otherwise is
refused in one line (``method=baseline`` with ReSymNet would otherwise train PRISM and file it under
baseline). The name of a plug-in reward model (``reward.name=<plug-in>``) is also a method: its own. Left out
(the env files leave it out), the name is **derived** from the keys (:func:`derive_method`): ``reward.name=none``
is ``oracle`` on the dense env and ``baseline`` otherwise, ``resymnet`` is ``prism`` with SymReg and ``wo_loss``
without, ``uniform`` / ``random`` / ``rrd`` / a plug-in reward keep their names, and ``+symreg`` marks SymReg on a
reward-free arm (``baseline+symreg``).

``method_label`` is the free part: a label of the user's own for reports, ``run_dir`` and ``summary.json``
(``method=prism method_label=prism-lr1e-3``). It may not be another built-in method's name. A run's label is
``method_label`` when set, else ``method`` (:func:`run_label`).

"SymReg on" is what the config names: ``agent.symreg_lambda`` null (the env spec's λ) or > 0; off is λ = 0,
``agent.symmetry_mode: none`` or a backbone without the key. The loader fills a null λ with the spec's before
it derives the method, so on an env without a symmetry table (λ = 0, with a warning) a derived method says so
(``wo_loss``, ``baseline``); an explicit ``method: prism`` there warns, as on a backbone without SymReg.
A run labelled ``prism`` on a backbone without SymReg warns once instead of being refused: every method
overlay composes with every backbone.

Run folders written before labels were split carry their arm in ``method`` (``method: e-prism``):
:func:`relabel_record` moves such a name to ``method_label`` when a run folder's config.yaml is loaded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from prism.core.errors import ConfigError

SYMREG_KEY = "symreg_lambda"
"""The key that makes a backbone one with SymReg (its λ)."""


def _keys(node: Any) -> Mapping[str, Any]:
    """A config node's keys and values, typed (a dataclass) or merged (a DictConfig): a backbone's or reward
    model's own keys are present only on the configs of the parts that have them."""
    return node if isinstance(node, DictConfig) else vars(node)


@dataclass(frozen=True)
class MethodFacts:
    """What a config names that decides its method: read from a typed config or a merged DictConfig."""

    reward: str
    """``reward.name``."""
    dense: bool
    """``env.dense`` (the oracle's env: no hidden channel)."""
    symreg: bool | None
    """SymReg named on (λ null or > 0), off (λ = 0 or ``agent.symmetry_mode: none``), or ``None``: the backbone
    has no SymReg."""
    use_dense_features: bool
    ensemble_size: int
    residual: bool
    relabel: bool
    cycles: int
    sparse_channel: int | None
    """``env.sparse_channel`` as written, except that the last channel's non-negative index (``n − 1`` when the
    env's objective count ``n`` is known) reads as −1: the same channel."""

    @classmethod
    def of(cls, config: Any, n_objectives: int | None = None, *, as_written: bool = False) -> MethodFacts:
        """The facts of ``config`` (a :class:`~prism.config.schema.RunConfig` or its merged DictConfig);
        ``n_objectives``: the env's objective count, where the caller knows it. ``as_written``: read a λ the
        loader filled from the env spec (``RunConfig.spec_defaults``) as the ``null`` the config said, i.e.
        SymReg named on, rather than as the spec's λ it became (0 on an env without a symmetry table)."""
        agent, reward = config.agent, config.reward
        has_key = SYMREG_KEY in _keys(agent)
        lam = _keys(agent).get(SYMREG_KEY)
        if as_written and f"agent.{SYMREG_KEY}" in getattr(config, "spec_defaults", ()):
            lam = None
        if config.protocol == "released" and reward.name == "none":
            lam = (
                0.0  # the released protocol runs its reward-free arms without SymReg (prism.config.protocols)
            )
        return cls(
            reward=str(reward.name),
            dense=bool(config.env.dense),
            # symmetry_mode none switches symmetry off whatever λ says; exact keeps it (an equivariant actor)
            symreg=(_keys(agent).get("symmetry_mode") != "none" and (lam is None or lam > 0))
            if has_key
            else None,
            # ReSymNet's own keys (its ablations); another model's config has none: read as ReSymNet's defaults
            use_dense_features=bool(_keys(reward).get("use_dense_features", True)),
            ensemble_size=int(_keys(reward).get("ensemble_size", 3)),
            residual=bool(_keys(reward).get("residual", True)),
            relabel=bool(reward.relabel),
            cycles=int(config.loop.cycles),
            sparse_channel=-1
            if n_objectives is not None and config.env.sparse_channel == n_objectives - 1
            else config.env.sparse_channel,
        )

    @property
    def symreg_on(self) -> bool:
        return bool(self.symreg)


@dataclass(frozen=True)
class BuiltinMethod:
    """A built-in method name: what it means (for the refusal) and the rule a config must meet to carry it."""

    name: str
    means: str
    agrees: Callable[[MethodFacts], bool]


def _learned(f: MethodFacts) -> bool:
    return f.reward == "resymnet" and not f.dense


BUILTIN_METHODS: dict[str, BuiltinMethod] = {
    m.name: m
    for m in (
        BuiltinMethod(
            "oracle",
            "env.dense=true, reward.name=none and no SymReg (agent.symreg_lambda=0)",
            lambda f: f.dense and f.reward == "none" and not f.symreg_on,
        ),
        BuiltinMethod(
            "oracle+symreg",
            "env.dense=true, reward.name=none and SymReg on",
            lambda f: f.dense and f.reward == "none" and f.symreg_on,
        ),
        BuiltinMethod(
            "baseline",
            "env.dense=false, reward.name=none and no SymReg (agent.symreg_lambda=0)",
            lambda f: not f.dense and f.reward == "none" and not f.symreg_on,
        ),
        BuiltinMethod(
            "baseline+symreg",
            "env.dense=false, reward.name=none and SymReg on",
            lambda f: not f.dense and f.reward == "none" and f.symreg_on,
        ),
        BuiltinMethod(
            "prism",
            "reward.name=resymnet with SymReg on (agent.symreg_lambda null or > 0)",
            # a backbone without SymReg may carry the label (it warns once: shaping only)
            lambda f: _learned(f) and f.symreg is not False,
        ),
        BuiltinMethod(
            "wo_loss",
            "reward.name=resymnet without SymReg (agent.symreg_lambda=0)",
            lambda f: _learned(f) and not f.symreg_on,
        ),
        BuiltinMethod("uniform", "reward.name=uniform", lambda f: f.reward == "uniform"),
        BuiltinMethod("random", "reward.name=random", lambda f: f.reward == "random"),
        # RRD's learned decomposition in ReSymNet's place (SymReg as the env file sets it: the e-prism arm with
        # only the reward model swapped); like uniform and random, named by its reward whatever λ is.
        BuiltinMethod("rrd", "reward.name=rrd", lambda f: f.reward == "rrd"),
        BuiltinMethod(
            "wo_dense",
            "reward.name=resymnet with reward.use_dense_features=false",
            lambda f: _learned(f) and not f.use_dense_features,
        ),
        BuiltinMethod(
            "wo_ensemble",
            "reward.name=resymnet with reward.ensemble_size=1",
            lambda f: _learned(f) and f.ensemble_size == 1,
        ),
        BuiltinMethod(
            "wo_residual",
            "reward.name=resymnet with reward.residual=false",
            lambda f: _learned(f) and not f.residual,
        ),
        BuiltinMethod(
            "wo_refinement",
            "a reward model (reward.name other than none) with loop.cycles=1",
            lambda f: f.reward != "none" and f.cycles == 1,
        ),
        BuiltinMethod(
            "relabel",
            "a reward model (reward.name other than none) with reward.relabel=true",
            lambda f: f.reward != "none" and f.relabel,
        ),
        BuiltinMethod(
            "sparse_cost",
            "the last reward channel hidden (env.sparse_channel=-1, or its index n-1), not the dense env",
            lambda f: not f.dense and f.sparse_channel == -1,
        ),
    )
}
"""The built-in method names (the paper's arms and ablations, ``conf/method/``, ``conf/ablation/``)."""

BUILTIN_REWARDS = ("none", "resymnet", "uniform", "random", "rrd")
"""The reward methods prism ships; another ``reward.name`` is a plug-in's, and names a method of its own."""


def derive_method(config: Any) -> str:
    """The method name of a config that leaves ``method`` out (typed config or merged DictConfig).

    SymReg is read from ``agent.symreg_lambda`` as the config holds it: the loader has filled a null λ with
    the env spec's, so on an env without a symmetry table (λ = 0: ``mo-hopper-2obj-v5``) ReSymNet is
    ``wo_loss``, not ``prism``; a λ still null (a config built in Python) reads as SymReg on."""
    f = MethodFacts.of(config)
    symreg = "+symreg" if f.symreg_on else ""
    if f.reward == "none":
        return ("oracle" if f.dense else "baseline") + symreg
    if f.reward == "resymnet":
        return "prism" if f.symreg_on else "wo_loss"
    return f.reward  # uniform, random, rrd or a plug-in reward model: its own name


def known_method(name: str, config: Any) -> bool:
    """Whether ``name`` may stand in ``method`` for ``config``: a built-in name, or the plug-in reward's."""
    return name in BUILTIN_METHODS or (name == str(config.reward.name) and name not in BUILTIN_REWARDS)


def check_method(config: Any, *, record: bool = False, n_objectives: int | None = None) -> None:
    """Refuse, in one line naming the key, a ``method`` the config's keys contradict, an unknown one, or a
    ``method_label`` that passes for another built-in method (except in a run folder's own config,
    ``record``: labels written before they were split) or cannot be a folder name. A config built in Python
    may leave ``method`` as ``None``: it is then derived where it is used (:func:`run_label`).
    ``n_objectives``: the env's objective count, where known (see :class:`MethodFacts`). A λ left null for
    the spec agrees both with what it names (SymReg at the spec's λ: ``method: prism`` from the PRISM overlay,
    which then warns on an env without a table) and with what it resolved to (``wo_loss``, the derived name
    there)."""
    name, label = config.method, config.method_label
    if name is None:
        name = derive_method(config)
    elif name in BUILTIN_METHODS:
        rule = BUILTIN_METHODS[name]
        named = MethodFacts.of(config, n_objectives, as_written=True)
        resolved = MethodFacts.of(config, n_objectives)
        if not (rule.agrees(named) or rule.agrees(resolved)):
            raise ConfigError(
                f"method: {name} means {rule.means}, but this config is "
                f"{derive_method(config)}; leave method "
                f"out (it is derived) or set the keys {name} needs, and name a variant with method_label=<label>"
            )
    elif not known_method(name, config):
        from prism.core._text import did_you_mean

        raise ConfigError(
            f"method: unknown method {name!r} (built-in: {', '.join(BUILTIN_METHODS)}; or a plug-in reward "
            f"model's name){did_you_mean(name, BUILTIN_METHODS)}; for a label of your own set "
            f"method_label={name} and leave method out"
        )
    if label is None:
        return
    if not isinstance(label, str) or not label.strip() or "/" in label or label in (".", ".."):
        raise ConfigError(f"method_label: must be a non-empty name without '/', got {label!r}")
    if label in BUILTIN_METHODS and label != name and not record:
        raise ConfigError(
            f"method_label: {label!r} is the built-in method {label}, and this run is {name}; a label of "
            f"your own must not pass for another method (use e.g. method_label={name}-{label})"
        )


def run_label(config: Any) -> str:
    """The name a run is filed and reported under: ``method_label`` when set, else ``method``."""
    if config.method_label is not None:
        return config.method_label
    return config.method if config.method is not None else derive_method(config)


DEFAULT_BACKBONE = "capql"
"""The backbone a default ``run_dir`` does not name (:data:`prism.config.schema.DEFAULT_AGENT`)."""


def backbone_suffix(backbone: Any) -> str:
    """``""`` for the default backbone, else ``-<name>`` (a class path ``pkg.mod:Agent`` gives ``-Agent``): what
    the default ``run_dir``'s method folder adds, so runs of one method on two backbones get two folders."""
    if backbone is None or str(backbone) == DEFAULT_BACKBONE:
        return ""
    name = str(backbone).rpartition(":")[2].rpartition(".")[2] or str(backbone)
    return "-" + "".join(c if c.isalnum() or c in "_-." else "_" for c in name)


LOSS_SUFFIX = "-randomized"
"""What a default ``run_dir``'s method folder adds for ``reward.loss=randomized`` (``prism-randomized``)."""

_NO_MODEL = ("none", "uniform", "random")  # reward methods that fit nothing, so reward.loss does not apply


def loss_suffix(reward_name: Any, loss: Any) -> str:
    """``-randomized`` for a learned reward model fitted with the randomized loss, else ``""``: runs of eq. 1
    and of the randomized loss are both ``prism``, and must not meet in one default folder. RRD's loss is
    always randomized, and its folder already says ``rrd``; a method without a model ignores the key."""
    if str(loss) != "randomized" or str(reward_name) in (*_NO_MODEL, "rrd"):
        return ""
    return LOSS_SUFFIX


def label_resolver(
    method: Any, method_label: Any, backbone: Any = None, reward_name: Any = None, loss: Any = None
) -> str:
    """The ``${prism_label:${method},${method_label},${agent.name},${reward.name},${reward.loss}}``
    interpolation of the default ``run_dir``: the run's label (:func:`run_label`), then ``-randomized`` for the
    randomized fit (:func:`loss_suffix`), then ``-<backbone>`` for a backbone other than CAPQL
    (``prism-gpi_pd``; CAPQL runs of eq. 1 keep the folder names they always had). The last two arguments are
    optional, so a config.yaml written with the three-argument form still loads."""
    label = str(method_label if method_label is not None else method)
    return label + loss_suffix(reward_name, loss) + backbone_suffix(backbone)


def relabel_record(
    config: Any,
    n_objectives: Callable[[], int] | None = None,
    resolved: Callable[[], Any] | None = None,
) -> Any:
    """A run folder's config as written before labels were split: an arm name in ``method`` (``e-prism``)
    or a built-in name its keys contradict moves to ``method_label`` and ``method`` is derived. Returns the
    config (a new one when anything moved). ``n_objectives()``: the env's objective count, asked for only
    when the keys seem to contradict a built-in name (``sparse_cost`` written as ``env.sparse_channel=n-1``
    agrees once ``n`` is known, as :func:`check_method` judges it). ``resolved()``: the config with the env
    spec's defaults filled in, asked for likewise: ``wo_loss`` written by a run whose λ was left to a spec
    without a symmetry table (λ = 0) agrees with what the run was, as :func:`check_method` judges it too."""
    name = config.method
    if config.method_label is not None or name is None:
        return config
    rule = BUILTIN_METHODS.get(name)
    if rule is None:
        fits = known_method(name, config)
    else:
        fits = rule.agrees(MethodFacts.of(config, as_written=True))
        if not fits and n_objectives is not None:
            fits = rule.agrees(MethodFacts.of(config, n_objectives(), as_written=True))
        if not fits and resolved is not None:
            fits = rule.agrees(MethodFacts.of(resolved(), n_objectives() if n_objectives else None))
    if fits:
        return config
    return dataclasses.replace(config, method=derive_method(config), method_label=name)

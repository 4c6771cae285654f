"""Study files: a YAML study (``conf/studies/<name>.yaml``, or a user's own) read into a :class:`Preset`.

The keys are :class:`Preset`'s and its parts' field names (docs/studies.md lists them), except where YAML says
it more plainly: ``arms`` maps each arm's name to its overlay (empty: the plain method of that name), which gives
both the columns (``methods``) and the arms; ``env_arms`` is ``env_methods``; ``aggregates`` lists the main
aggregate (no ``name``) and the named ones; ``scale`` names a shared set of overrides,
``conf/studies/scales/<scale>.yaml``, that come before the study's own. A list of pairs may be written as a
mapping (``env_overrides: {hopper: [...]}``). Every error is one line naming the file and the offending key.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path

import yaml

from prism.config import PROTOCOLS
from prism.core.errors import ConfigError
from prism.experiments.grid import BACKBONES, CONF, ENV_FILES, METHODS, METRICS, Aggregate, Arm, Preset

STUDIES = CONF / "studies"
SCALES = STUDIES / "scales"

_RENAMED = {"env_arms": "env_methods"}
_OWN_KEYS = ("arms", "scale", "aggregates")
_SET_HERE = ("methods", "arms", "aggregate", "more_aggregates")
"""Preset fields a study file does not name: they come from its ``arms`` and ``aggregates``."""
_TYPE_NAMES = {str: "a string", bool: "true or false", int: "an integer", float: "a number"}


class StudyError(ConfigError):
    """A bad study file: ``str(err)`` is one line, ``<file>: <key>: <what is wrong>``."""


class _Bad(Exception):
    """A bad value at a key; :func:`load_study` adds the file's name."""


def shipped() -> tuple[str, ...]:
    """The names of the shipped studies (``prism reproduce --preset NAME``)."""
    return tuple(sorted(path.stem for path in STUDIES.glob("*.yaml")))


def load_preset(name: str) -> Preset:
    """The shipped study ``name`` (``conf/studies/<name>.yaml``)."""
    if name not in shipped():
        raise StudyError(f"--preset: no study {name!r} in {STUDIES} (shipped: {', '.join(shipped())})")
    return load_study(STUDIES / f"{name}.yaml")


def load_study(path: str | Path) -> Preset:
    """The study in the YAML file ``path``, checked: raises :class:`StudyError` naming the offending key.

    Relative paths in it (joined ``runs``, a take-off's ``reference_runs``) stay relative: they resolve against
    the repository root when read, as the shipped studies' committed folders do."""
    path = Path(path)
    try:
        return _preset(_read(path), path)
    except _Bad as err:
        raise StudyError(f"{path}: {err}") from None


class _UniqueKeys(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice in one mapping (PyYAML keeps the last, silently)."""

    def construct_mapping(self, node, deep=False):
        merge = "tag:yaml.org,2002:merge"  # `<<: *anchor` keys may be given again (the mapping's own win)
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == merge:
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise _Bad(f"{key}: given twice (line {key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read(path: Path) -> dict:
    try:
        data = yaml.load(path.read_text(), Loader=_UniqueKeys)  # noqa: S506 (a SafeLoader)
    except OSError as err:
        raise StudyError(f"{path}: cannot read it ({err.strerror})") from None
    except yaml.YAMLError as err:
        raise StudyError(f"{path}: not YAML ({' '.join(str(err).split())})") from None
    except _Bad as err:
        raise StudyError(f"{path}: {err}") from None
    if not isinstance(data, dict):
        raise StudyError(f"{path}: a study is a mapping of keys (docs/studies.md), got {_kind(data)}")
    return data


def _kind(value) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"


def _convert(value, hint, where: str):
    """``value`` (parsed YAML) as the type ``hint`` of a dataclass field: tuples from lists, nested dataclasses
    from mappings, ``X | None`` from ``null``, a number for a float."""
    if dataclasses.is_dataclass(hint):
        return hint(**_build(hint, value, where))
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (hint,) = (a for a in args if a is not type(None))
        return _convert(value, hint, where)
    if origin is tuple and args[-1] is Ellipsis:
        item = args[0]
        if isinstance(value, dict) and typing.get_origin(item) is tuple:  # a list of pairs, as a mapping
            key, val = typing.get_args(item)
            return tuple(
                (_convert(k, key, where), _convert(v, val, f"{where}.{k}")) for k, v in value.items()
            )
        if not isinstance(value, list):
            raise _Bad(f"{where}: expected a list, got {_kind(value)}")
        return tuple(_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is tuple:
        if not isinstance(value, list) or len(value) != len(args):
            raise _Bad(f"{where}: expected a list of {len(args)}, got {_kind(value)}")
        return tuple(_convert(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
        raise _Bad(f"{where}: expected {_TYPE_NAMES[hint]}, got {_kind(value)}")
    return value


def _build(cls, data, where: str, skip: tuple[str, ...] = ()):
    """The fields of a ``cls`` (a dataclass) from the mapping ``data``, converted (its keys: the fields less ``skip``)."""
    if not isinstance(data, dict):
        raise _Bad(f"{where or 'the file'}: expected a mapping, got {_kind(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in skip}
    prefix = f"{where}." if where else ""
    for key in data:
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise _Bad(f"{prefix}{key}: unknown key (known: {known})")
    missing = [n for n, f in fields.items() if f.default is dataclasses.MISSING and n not in data]
    if missing:
        raise _Bad(f"{prefix}{missing[0]}: missing")
    return {k: _convert(v, hints[k], f"{prefix}{k}") for k, v in data.items()}


def _preset(data: dict, path: Path) -> Preset:
    own = {key: data.pop(key) for key in _OWN_KEYS if key in data}
    for yaml_key, field in _RENAMED.items():
        if field in data:
            raise _Bad(f"{field}: unknown key (a study file calls it {yaml_key})")
        if yaml_key in data:
            data[field] = data.pop(yaml_key)
    if not isinstance(own.get("arms"), dict) or not own["arms"]:
        raise _Bad(f"arms: expected a mapping of arm names to overlays, got {_kind(own.get('arms'))}")
    names = tuple(_convert(name, str, "arms") for name in own["arms"])
    arms = tuple(
        Arm(name, **_build(Arm, spec, f"arms.{name}", skip=("name",)))
        for name, spec in own["arms"].items()
        if spec is not None  # an empty arm: the plain method of its name
    )
    aggregates = _convert(own.get("aggregates", []), tuple[Aggregate, ...], "aggregates")
    if sum(not a.name for a in aggregates) > 1:
        raise _Bad("aggregates: two have no name (only the main aggregate may leave it out)")
    fields = _build(Preset, {"overrides": [], **data}, "", skip=_SET_HERE)
    fields["overrides"] = _scale(own.get("scale")) + fields["overrides"]
    preset = Preset(
        **fields,
        methods=names,
        arms=arms,
        aggregate=next((a for a in aggregates if not a.name), None),
        more_aggregates=tuple(a for a in aggregates if a.name),
    )
    _check(preset, aggregates)
    return preset


def _scale(name) -> tuple[str, ...]:
    """The overrides of the shared scale ``name`` (``conf/studies/scales/<name>.yaml``; None: none)."""
    if name is None:
        return ()
    known = sorted(p.stem for p in SCALES.glob("*.yaml"))
    if name not in known:
        raise _Bad(f"scale: no scale {name!r} in {SCALES} (one of: {', '.join(known)})")
    data = _read(SCALES / f"{name}.yaml")
    for key in data:
        if key not in ("description", "overrides"):
            raise _Bad(f"scale: {SCALES / name}.yaml: {key}: unknown key (known: description, overrides)")
    return _convert(data.get("overrides", []), tuple[str, ...], f"scale {name}: overrides")


def _one_of(value, allowed, where: str, what: str) -> None:
    if value not in allowed:
        raise _Bad(f"{where}: {value!r} is not {what} (one of: {', '.join(map(str, allowed))})")


def _check_seeds(where: str, seeds: tuple[int, ...]) -> None:
    """Seeds name run folders (``seed<k>``) and seed the generators: whole numbers ≥ 0, each once."""
    for seed in seeds:
        if seed < 0:
            raise _Bad(f"{where}: {seed} is not a seed (a whole number ≥ 0)")
    if len(set(seeds)) < len(seeds):
        twice = sorted({s for s in seeds if seeds.count(s) > 1})
        raise _Bad(f"{where}: seed {twice[0]} is given twice")


def _check(p: Preset, aggregates: tuple[Aggregate, ...]) -> None:
    """What the types leave open: names that must be envs, methods, protocols or the study's own arms."""
    from prism.experiments.paper_claims import check_claims

    envs, arms = p.envs, p.methods
    for i, env in enumerate(envs):
        _one_of(env, tuple(ENV_FILES), f"envs[{i}]", "an env")
    _check_seeds("seeds", p.seeds)
    for arm in p.arms:
        _check_seeds(f"arms.{arm.name}.seeds", arm.seeds or ())
    for i, join in enumerate(p.joined):
        _check_seeds(f"joined[{i}].seeds", join.seeds)
    _one_of(p.backbone, BACKBONES, "backbone", "a backbone")
    _one_of(p.protocol, PROTOCOLS, "protocol", "a protocol")
    overrides = {"overrides": p.overrides, **{f"env_overrides.{e}": o for e, o in p.env_overrides}}
    for arm in p.arms:
        _one_of(arm.method, tuple(METHODS), f"arms.{arm.name}.method", "a method")
        if arm.protocol is not None:
            _one_of(arm.protocol, PROTOCOLS, f"arms.{arm.name}.protocol", "a protocol")
        overrides[f"arms.{arm.name}.overrides"] = arm.overrides
    for name in set(arms) - {a.name for a in p.arms}:
        _one_of(name, tuple(METHODS), f"arms.{name}", "a method (an arm with no overlay is the plain method)")
    for where, keys in overrides.items():
        for key in keys:
            if "=" not in key:
                raise _Bad(f"{where}: {key!r} is not an override (key=value)")
    for key, pairs in (("env_overrides", p.env_overrides), ("env_arms", p.env_methods)):
        for env, _ in pairs:
            _one_of(env, envs, f"{key}.{env}", "an env of the study")
    for env, names in p.env_methods:
        for name in names:
            _one_of(name, arms, f"env_arms.{env}", "an arm of the study")
    for i, ratio in enumerate(p.ratios):
        _one_of(ratio.numerator, arms, f"ratios[{i}].numerator", "an arm of the study")
        _one_of(ratio.denominator, arms, f"ratios[{i}].denominator", "an arm of the study")
    for i, join in enumerate(p.joined):
        _one_of(join.env, envs, f"joined[{i}].env", "an env of the study")
        for name in join.arms:
            _one_of(name, p.methods_for(join.env), f"joined[{i}].arms", f"an arm of {join.env}")
        for here, _ in join.renamed:
            _one_of(here, join.arms, f"joined[{i}].renamed", "one of its arms")
        if join.cycle_end < 0:
            raise _Bad(f"joined[{i}].cycle_end: {join.cycle_end} is not a cycle (1, 2, …; 0: the run's end)")
    for i, agg in enumerate(aggregates):
        for name in (agg.normaliser, *agg.arms, *(n for pair in agg.improvements for n in pair)):
            _one_of(name, arms, f"aggregates[{i}]", "an arm of the study")
        for env in agg.envs:
            _one_of(env, envs, f"aggregates[{i}].envs", "an env of the study")
    if p.take_off:
        _one_of(p.take_off.env, envs, "take_off.env", "an env of the study")
    for i, gate in enumerate(p.cost_gates):
        _one_of(gate.env, envs, f"cost_gates[{i}].env", "an env of the study")
        _one_of(gate.arm, arms, f"cost_gates[{i}].arm", "an arm of the study")
        _one_of(gate.reference, arms, f"cost_gates[{i}].reference", "an arm of the study")
    for env in p.primary_envs:
        _one_of(env, envs, "primary_envs", "an env of the study")
    _check_sweeps(p)
    try:
        check_claims(p)
    except ValueError as err:
        raise _Bad(f"paper_claims: {err}") from None


def _check_sweeps(p: Preset) -> None:
    """A sweep's arms are the study's, each set at its level (where its overrides name the key), and every
    comparison it judges is one of the study's ratio rows."""
    ratios = {(r.numerator, r.denominator) for r in p.ratio_rows()}
    names = [s.name for s in p.sweeps]
    if len(set(names)) < len(names):
        raise _Bad("sweeps: two have the same name (one may leave it out; the others name their files)")
    for i, sweep in enumerate(p.sweeps):
        where = f"sweeps[{i}]"
        if not sweep.series:
            raise _Bad(f"{where}.series: expected at least one series")
        for metric in sweep.metrics:
            _one_of(metric, METRICS, f"{where}.metrics", "a metric")
        if sweep.reference:
            _one_of(sweep.reference, p.methods, f"{where}.reference", "an arm of the study")
        for k, series in enumerate(sweep.series):
            at = f"{where}.series[{k}]"
            if series.versus:
                _one_of(series.versus, p.methods, f"{at}.versus", "an arm of the study")
            if series.band is not None and not 0 <= series.band[0] < series.band[1]:
                raise _Bad(f"{at}.band: {list(series.band)} is not a range [low, high] with 0 ≤ low < high")
            for level, arm in series.arms:
                _one_of(arm, p.methods, f"{at}.arms", "an arm of the study")
                value = p.value_set(arm, sweep.key)
                if value is not None and not _same_level(value, level):
                    raise _Bad(f"{at}.arms: {arm} sets {sweep.key}={value}, not its level {level:g}")
                if series.versus and arm != series.versus and (arm, series.versus) not in ratios:
                    raise _Bad(
                        f"{at}.arms: {arm} / {series.versus} is not a ratio of the study (add it to ratios)"
                    )
            for env in p.envs:
                levels = [level for level, arm in series.arms if arm in p.methods_for(env)]
                if len(set(levels)) < len(levels):
                    twice = next(level for level in levels if levels.count(level) > 1)
                    raise _Bad(f"{at}.arms: {env} runs two arms at level {twice:g} (one per env and level)")


def _same_level(text: str, level: float) -> bool:
    try:
        return float(text) == level
    except ValueError:
        return False

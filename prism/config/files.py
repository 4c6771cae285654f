"""Config files: reading one YAML layer (one-line errors with line and column), writing a run's config.yaml
(with the ``resolved:`` record), the default ``run_dir``'s folder name, and the keys of older config.yaml
files. Imports nothing heavy, so a bad config file is reported before torch or Lightning is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from prism.config.methods import label_resolver
from prism.config.schema import RunConfig
from prism.core.errors import ConfigError


def _seed_dir(seed: int, seeds: Any) -> str:
    """The last folder of the default ``run_dir``: ``seed<N>``, or ``seeds<A>-<B>-…`` for a population."""
    if seeds is None:
        return f"seed{seed}"
    return "seeds" + "-".join(str(s) for s in seeds)


def _register(name: str, resolver: Any) -> None:
    # OmegaConf 2.4 renamed register_new_resolver (now deprecated) to register_resolver; 2.3 has only the former.
    try:
        OmegaConf.register_resolver(name, resolver, annotation_validation="off")  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # OmegaConf 2.3 (no register_resolver, or one without the option)
        OmegaConf.register_new_resolver(name, resolver)


if not OmegaConf.has_resolver("prism_seed_dir"):
    _register("prism_seed_dir", _seed_dir)
if not OmegaConf.has_resolver("prism_label"):
    _register("prism_label", label_resolver)

RESOLVED_KEY = "resolved"
"""The block at the end of a run folder's config.yaml recording what the run resolved at start (values left
``null`` / ``auto``, the prism version): for readers only; the loader drops it."""


def _yaml_error(path: Path, err: Exception) -> str:
    """A YAML syntax error in one line, with the line and column (1-based) where the parser stopped."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    problem = getattr(err, "problem", None) or (str(err).strip().splitlines() or [type(err).__name__])[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"--config: {str(path)!r} is not valid YAML{where}: {problem}"


def _folder_hint(folder: Path) -> str:
    """The config files a folder given as ``--config`` holds (the first few), to pick from."""
    try:
        names = sorted(p.name for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    except OSError:
        return ""
    if not names:
        return ""
    shown = ", ".join(str(folder / name) for name in names[:4]) + (", ..." if len(names) > 4 else "")
    return f"; give one of its files: {shown}"


def _conf_hint(path: Path) -> str:
    """For a missing ``conf/…`` path: conf/ ships in the repository (the clone), not in the installed package,
    so run from the clone; with an editable install the clone is known, and the line names the file there."""
    if path.is_absolute() or not path.parts or path.parts[0] != "conf":
        return ""
    clone = Path(__file__).resolve().parents[2]  # prism/config/files.py -> the clone, for an editable install
    if (clone / path).is_file():
        return f" here; conf/ ships in prism's repository, not in the installed package; the clone has {str(clone / path)!r}"
    return (
        " here; conf/ ships in prism's repository (the git clone), not in the installed package: run from "
        "the clone or give the file's path in it"
    )


def load_layer(path: Path) -> DictConfig:
    """One config file as a DictConfig; a missing, unreadable, invalid, empty or non-mapping file is a
    :class:`ConfigError`. (An empty file is refused: a config file that sets nothing is almost always the
    wrong file.)"""
    if path.is_dir():
        raise ConfigError(f"--config: {str(path)!r} is a folder, not a config file{_folder_hint(path)}")
    if not path.is_file():
        raise ConfigError(f"--config: file {str(path)!r} does not exist{_conf_hint(path)}")
    _check_mapping(path)
    try:
        layer = OmegaConf.load(path)
    except OSError as err:
        raise ConfigError(f"--config: cannot read {str(path)!r}: {err.strerror}") from None
    except Exception as err:  # YAML syntax errors come in several types
        raise ConfigError(_yaml_error(path, err)) from None
    if not isinstance(layer, DictConfig):
        raise ConfigError(f"--config: {str(path)!r} must hold a mapping of keys, not a list")
    if len(layer) == 0:
        raise ConfigError(
            f"--config: {str(path)!r} is empty (sets no key); give a config file that sets at least one key, "
            "e.g. conf/quickstart.yaml"
        )
    return layer


def _what(value: Any) -> str:
    """What a YAML document holds, for the not-a-mapping error."""
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"plain text ({shown!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return f"the boolean {value}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    return f"a {type(value).__name__}"


def _check_mapping(path: Path) -> None:
    """Refuse a config file whose YAML document is not a mapping, saying what it is. OmegaConf reads plain text
    (``just some text``) as a mapping with that one key and no value, which the typed merge then reports as
    ``Key 'just some text' not in 'RunConfig'``, and a number as an unreadable file; a syntax error is left to
    :func:`load_layer`, which names its line and column."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ConfigError(f"--config: cannot read {str(path)!r}: {err.strerror}") from None
    except (yaml.YAMLError, ValueError):
        return
    if data is not None and not isinstance(data, dict):
        raise ConfigError(
            f"--config: {str(path)!r} is not a mapping of keys (`key: value` lines, e.g. `seed: 3`); it holds "
            f"{_what(data)}"
        )


def check_node_types(layer: DictConfig, schema: DictConfig, source: str, prefix: str = "") -> None:
    """Refuse a scalar or list where the schema has a group of keys (``loop: 3``, ``eval: {final: 5}``), naming
    the key and ``source`` (a file, or "overrides"): OmegaConf's own error ("Merge error: int is not a
    subclass of LoopConfig") names neither. Keys the schema lacks are left for the merge to refuse."""
    for key in layer:
        if key not in schema:
            continue
        group = schema.get(key)
        if not isinstance(group, DictConfig):
            continue
        value = layer.get(key)
        if isinstance(value, DictConfig):
            check_node_types(value, group, source, f"{prefix}{key}.")
            continue
        example = next(iter(group), "key")
        raise ConfigError(
            f"{prefix}{key}: must be a mapping of {OmegaConf.get_type(group).__name__} keys "
            f"({prefix}{key}.{example}: …), got {value!r} (in {source})"
        )


RUN_LEVEL_KEYS = {
    "agent.seed": "agent.seed: not an agent key; set the run's top-level `seed` (or `seeds`), which seeds the "
    "agent too",
    "agent.device": "agent.device: not an agent key; set the run's top-level `device` (one device for the "
    "whole run)",
}
"""Keys that older configs had under ``agent:`` and that belong to the run: the error says where they went."""


def to_yaml(config: RunConfig, resolved: dict[str, Any] | None = None) -> str:
    """The config as YAML with every key (what a run folder's config.yaml holds); a population's leaves out
    ``seed``, which it does not use, and a key filled from the env spec at load (``RunConfig.spec_defaults``)
    is written ``null``. With ``resolved`` (see :func:`resolved_values`), a commented
    ``resolved:`` block follows."""
    data = OmegaConf.to_container(OmegaConf.structured(config), enum_to_str=True)
    for key in config.spec_defaults:  # filled from the env spec at load: written as the files said it
        *parents, leaf = key.split(".")
        node = data
        for part in parents:
            node = node[part]
        node[leaf] = None
    if config.seeds is not None:
        del data["seed"]
    text = OmegaConf.to_yaml(data)
    if resolved:
        text += (
            "# What this run resolved at start for the keys above left null / auto, and the prism version that\n"
            "# wrote the file. For reading only: prism reads the keys above and ignores this block.\n"
            + OmegaConf.to_yaml({RESOLVED_KEY: resolved})
        )
    return text


def same_run(a: RunConfig, b: RunConfig) -> bool:
    """Whether two configs describe the same run (as their config.yaml would say: ``seed`` is ignored in a
    population, which does not use it)."""
    return to_yaml(a) == to_yaml(b)

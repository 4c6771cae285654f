"""``prism config --describe``: every key of a config with its value and its documentation, read from the
docstrings under the fields of the config dataclasses (the one place keys are documented)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from functools import cache
from typing import Any


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Field name → the docstring written under it in ``cls`` or a base class (the subclass's wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):  # no source (e.g. a class built at run time)
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for statement, following in zip(body, body[1:]):
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[statement.target.id] = inspect.cleandoc(following.value.value)
    return docs


def yaml_value(value: Any) -> str:
    """``value`` as a config file spells it (``null``, ``true``, ``auto``, ``[256, 256]``), since ``--describe``
    is read to write YAML, and Python's reprs (``None``, ``'auto'``) are not what a config file takes."""
    import yaml

    if isinstance(value, tuple):  # a tuple field is a YAML list
        value = list(value)
    try:
        text = yaml.safe_dump(value, default_flow_style=True, width=10**9, allow_unicode=True)
    except yaml.representer.RepresenterError:  # a type YAML has no tag for (none in the schema today)
        return repr(value)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def describe(config: Any, width: int = 110) -> str:
    """Every key of ``config`` (a config dataclass, e.g. a loaded :class:`~prism.config.RunConfig`) as
    ``key = value`` followed by its documentation, indented; a group of keys gets a header line with its
    class's first docstring line."""
    lines: list[str] = []
    _describe(config, "", lines, width, frozenset(getattr(config, "spec_defaults", ())))
    return "\n".join(lines) + "\n"


def _describe(node: Any, prefix: str, lines: list[str], width: int, from_spec: frozenset[str]) -> None:
    docs = field_docs(type(node))
    for f in dataclasses.fields(node):
        if f.metadata.get("omegaconf_ignore"):  # not a key (RunConfig.spec_defaults)
            continue
        key, value = prefix + f.name, vars(node)[f.name]
        if key in from_spec:  # filled from the env spec at load: shown as a config file says it
            value = None
        if dataclasses.is_dataclass(value):
            summary = (inspect.getdoc(type(value)) or "").split("\n\n")[0].replace("\n", " ")
            lines.append(f"{key}:  [{type(value).__name__}] {summary}".rstrip())
            _describe(value, key + ".", lines, width, from_spec)
            continue
        lines.append(f"{key} = {yaml_value(value)}")
        doc = docs.get(f.name, "(undocumented)")
        for paragraph in doc.split("\n\n"):
            lines += textwrap.wrap(
                " ".join(paragraph.split()), width, initial_indent="    ", subsequent_indent="    "
            )

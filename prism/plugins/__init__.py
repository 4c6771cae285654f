"""Plug-ins: the registries every pluggable part is looked up in (:mod:`~prism.plugins.registry`), prism's
built-ins, each registered once (:mod:`~prism.plugins.builtin`), and what ``prism list`` shows
(:mod:`~prism.plugins.catalogue`).

``register`` is prism's own entry point in the group ``prism.plugins`` (``prism.plugins:register`` in
pyproject.toml). It is imported from :mod:`~prism.plugins.builtin` on first access only: the registry is
imported by the config dataclasses that the built-ins import in turn, so this package must not import them."""

from prism.core._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports("prism.plugins", {"register": "prism.plugins.builtin"}, globals())

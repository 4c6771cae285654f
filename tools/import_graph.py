"""Check the shape of prism's import graph: cycles and layer violations (issue 13).

Reads every module under ``prism/`` with :mod:`ast` (nothing is imported), collects its imports of other
prism modules — module-level and function-local alike, since a function-local import only postpones a
cycle, it does not remove it, and ``importlib.import_module("prism.…")`` calls with a literal name, which
are imports by another spelling — and prints

- every import cycle (a strongly connected component of more than one module, or a module importing
  itself), and
- every import of a module from a higher layer (the layer list is :data:`LAYERS`, bottom to top).

Imports under ``if TYPE_CHECKING:`` never run, but a reader (and a type checker) still sees them: a cycle that
closes only through one is reported too, as a type-only cycle (issue 31), and they count for the layers.
Importing ``prism.a.b`` makes an edge to ``prism.a.b`` only (not to the package ``prism.a`` that Python
also initialises), the usual convention of import checkers.

Usage: ``python tools/import_graph.py [--root DIR] [--graph]``; exit status 1 if anything is found.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from pathlib import Path

LAYERS: list[tuple[str, ...]] = [
    # bottom: environments, data, metrics, the evaluation protocol's config, the shared helpers (prism.core),
    # the terminal display and the plug-in registries (looked up by every layer above; the built-ins that fill
    # them sit with the config, which types its nodes by them)
    (
        "prism",
        "prism.core",
        "prism.display",
        "prism.plugins.registry",
        "prism.envs",
        "prism.data",
        "prism.metrics",
        "prism.evaluation.config",
    ),
    ("prism.reward",),
    ("prism.agents",),
    ("prism.evaluation",),
    ("prism.config", "prism.plugins"),  # the run config, the built-in plug-ins and prism list's catalogue
    ("prism.loop",),  # the PRISM loop: phases, the fit phase, loop state, diagnostics
    ("prism.run",),  # a run's plumbing: build/fit/resume/evaluate, checkpoints, folders, lock, clock, outputs
    ("prism.api", "prism.render"),  # using a trained run from Python, and watching it
    ("prism.experiments",),
    ("prism.cli",),
]
"""Layers, bottom to top: a module may import from its own layer and the ones below it."""


def layer_of(module: str) -> int:
    """Index in :data:`LAYERS` of the longest prefix naming ``module`` (a package covers its modules)."""
    best, best_len = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or (prefix != "prism" and module.startswith(prefix + "."))
            if matches and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best < 0:
        raise SystemExit(f"import_graph: module {module} is in no layer; add it to LAYERS")
    return best


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_import_module(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id == "import_module") or (
        isinstance(func, ast.Attribute) and func.attr == "import_module"
    )


def _imports(tree: ast.AST, module: str, is_package: bool, modules: set[str]) -> Iterable[tuple[str, bool]]:
    """(imported prism module, runs at run time) for every import statement in ``tree``."""

    def resolve(name: str) -> str | None:
        # the longest known module that ``name`` starts with (``prism.a.b.Name`` → ``prism.a.b``)
        while name:
            if name in modules:
                return name
            name = name.rpartition(".")[0]
        return None

    def visit(node: ast.AST, runtime: bool):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from visit(child, False)
            for child in node.orelse:
                yield from visit(child, runtime)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = resolve(alias.name)
                if target:
                    yield target, runtime
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{node.module}" if node.module else package
            else:
                base = node.module or ""
            for alias in node.names:
                # ``from pkg import sub`` imports the submodule ``pkg.sub`` when there is one
                target = resolve(f"{base}.{alias.name}") or resolve(base)
                if target:
                    yield target, runtime
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
            # importlib.import_module("prism.x") with a literal name imports prism.x as surely as a statement
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                target = resolve(first.value)
                if target:
                    yield target, runtime
        for child in ast.iter_child_nodes(node):
            yield from visit(child, runtime)

    yield from visit(tree, True)


def build_graph(root: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(run-time edges, all edges including TYPE_CHECKING ones) between the prism modules under ``root``."""
    files = {module_name(p, root): p for p in sorted((root / "prism").rglob("*.py"))}
    modules = set(files)
    runtime: dict[str, set[str]] = {m: set() for m in modules}
    every: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for target, at_run_time in _imports(tree, module, path.name == "__init__.py", modules):
            if target == module and path.name == "__init__.py":
                continue
            every[module].add(target)
            if at_run_time:
                runtime[module].add(target)
    return runtime, every


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with a cycle (Tarjan), each sorted, sorted by first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def strongconnect(v: str):
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return sorted(found)


def type_only_cycles(runtime: dict[str, set[str]], every: dict[str, set[str]]) -> list[list[str]]:
    """Cycles of the graph with TYPE_CHECKING imports that are not cycles at run time: each closes only
    through a type-only import (``a`` imports ``b``, ``b`` imports ``a`` for an annotation). Python runs it,
    but the two modules still cannot be read, tested or moved one without the other."""
    at_run_time = cycles(runtime)
    return [component for component in cycles(every) if component not in at_run_time]


def layer_violations(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where the imported module sits in a higher layer."""
    return sorted((a, b) for a in graph for b in graph[a] if layer_of(b) > layer_of(a))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--graph", action="store_true", help="also print every module's prism imports")
    args = parser.parse_args(argv)
    runtime, every = build_graph(args.root)
    if args.graph:
        for module in sorted(every):
            print(f"{module}: {', '.join(sorted(every[module]))}")
    found_cycles = cycles(runtime)
    type_only = type_only_cycles(runtime, every)
    violations = layer_violations(every)
    for component in found_cycles:
        print("cycle: " + " <-> ".join(component))
    for component in type_only:
        print("type-only cycle (closed by a TYPE_CHECKING import): " + " <-> ".join(component))
    for importer, imported in violations:
        print(
            f"layer violation: {importer} (layer {layer_of(importer)}) imports {imported} "
            f"(layer {layer_of(imported)})"
        )
    if not found_cycles and not type_only and not violations:
        print(f"ok: {len(runtime)} modules, no import cycles (type-only included), no layer violations")
    return 1 if found_cycles or type_only or violations else 0


if __name__ == "__main__":
    sys.exit(main())

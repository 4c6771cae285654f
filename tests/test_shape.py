"""The codebase's shape (issue 13): no import cycles, no imports from a higher layer, small modules, the data
layer independent of the reward layer, and a top level that reads as the method's parts plus the run, the CLI
and the API (docs/ARCHITECTURE.md, the tree). Checked with ``tools/import_graph.py`` (ast only, nothing
imported)."""

from __future__ import annotations

from pathlib import Path

from tool_modules import load_tool

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 600
"""Modules are split by idea; the cap only flags one that has grown several ideas (docs: ARCHITECTURE.md)."""

TOP_LEVEL_PACKAGES = {
    # the method's parts
    "envs": "environments, their specs and the sparse wrapper",
    "data": "segments, replay, features, collection",
    "reward": "the reward models (ReSymNet, RRD), their fits and the shapers",
    "agents": "the backbones (CAPQL, GPI-PD) behind one contract",
    "loop": "the PRISM loop: phases, the fit phase",
    "metrics": "hypervolume, EUM, VO",
    "evaluation": "the evaluation protocol and its callback",
    # a run, its config and what runs many of them
    "config": "the run config",
    "run": "a run's plumbing: build, fit, resume, evaluate, checkpoints, outputs",
    "experiments": "prism reproduce / advise: grids of runs and their reports",
    # what everything above shares
    "core": "the shared helpers: errors, seeding, checks, devices, interrupt, clocks, the stacked layer",
    "plugins": "the plug-in registries, the built-ins, prism list's catalogue",
    "display": "the terminal: progress bars and lines",
}
"""prism/'s packages, each with what it serves (a new one is added here and to docs/ARCHITECTURE.md's
tree)."""
TOP_LEVEL_MODULES = {"__init__.py", "api.py", "cli.py", "render.py"}
"""The only modules at prism/'s top level: the front doors (the Python API, the CLI, ``prism render``).
A shared helper goes to prism/core/, a plug-in matter to prism/plugins/, a part's code into its package."""

# Known exceptions to the import rules: none today. An entry needs a comment saying why and when it goes.
ALLOWED_CYCLES: list[list[str]] = []
ALLOWED_LAYER_VIOLATIONS: list[tuple[str, str]] = []


def _import_graph():
    return load_tool("import_graph")


def test_checker_finds_a_cycle_and_a_layer_violation(tmp_path):
    # The checker itself: a function-local import closing a cycle, and a low module importing a high one.
    pkg = tmp_path / "prism"
    (pkg / "envs").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "envs" / "__init__.py").write_text("")
    (pkg / "envs" / "a.py").write_text("from prism.envs.b import x\n")
    (pkg / "envs" / "b.py").write_text("def f():\n    from prism.envs import a\n\nx = 1\n")
    (pkg / "cli.py").write_text("")
    (pkg / "envs" / "c.py").write_text("import prism.cli\n")
    graph = _import_graph()
    runtime, every = graph.build_graph(tmp_path)
    assert graph.cycles(runtime) == [["prism.envs.a", "prism.envs.b"]]
    assert graph.layer_violations(every) == [("prism.envs.c", "prism.cli")]
    assert graph.main(["--root", str(tmp_path)]) == 1


def test_checker_counts_import_module_with_a_literal_name(tmp_path):
    # importlib.import_module("prism.x") is an import by another spelling (it hid registry -> built-ins).
    pkg = tmp_path / "prism" / "plugins"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "registry.py").write_text(
        "import importlib\n\ndef load():\n    importlib.import_module('prism.plugins.builtin')\n"
    )
    (pkg / "builtin.py").write_text("from prism.plugins.registry import load\n")
    graph = _import_graph()
    runtime, every = graph.build_graph(tmp_path)
    assert graph.cycles(runtime) == [["prism.plugins.builtin", "prism.plugins.registry"]]
    assert graph.layer_violations(every) == [("prism.plugins.registry", "prism.plugins.builtin")]


def test_checker_reports_a_cycle_closed_by_a_type_checking_import(tmp_path, capsys):
    # prism/config.py imported prism/protocols.py, which imported RunConfig back for annotations only (issue 31).
    pkg = tmp_path / "prism" / "config"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "loader.py").write_text("from prism.config.protocols import PROTOCOLS\n")
    (pkg / "protocols.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from prism.config.loader import RunConfig\n"
        "PROTOCOLS = ()\n"
    )
    graph = _import_graph()
    runtime, every = graph.build_graph(tmp_path)
    assert graph.cycles(runtime) == []  # Python runs it...
    assert graph.type_only_cycles(runtime, every) == [
        ["prism.config.loader", "prism.config.protocols"]
    ]  # ...a reader sees it
    assert graph.main(["--root", str(tmp_path)]) == 1
    assert (
        "type-only cycle (closed by a TYPE_CHECKING import): prism.config.loader <-> prism.config.protocols"
        in (capsys.readouterr().out)
    )


def test_no_import_cycles():
    graph = _import_graph()
    runtime, every = graph.build_graph(ROOT)
    assert [c for c in graph.cycles(runtime) if c not in ALLOWED_CYCLES] == []
    assert graph.type_only_cycles(runtime, every) == []


def test_no_imports_from_a_higher_layer():
    graph = _import_graph()
    _, every = graph.build_graph(ROOT)
    assert [v for v in graph.layer_violations(every) if v not in ALLOWED_LAYER_VIOLATIONS] == []


def test_data_imports_nothing_from_reward():
    graph = _import_graph()
    _, every = graph.build_graph(ROOT)
    bad = {
        (module, target)
        for module, targets in every.items()
        if module == "prism.data" or module.startswith("prism.data.")
        for target in targets
        if target == "prism.reward" or target.startswith("prism.reward.")
    }
    assert bad == set()


def test_every_module_is_at_most_600_lines():
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for path in (ROOT / "prism").rglob("*.py")
    }
    assert {path: n for path, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_the_top_level_holds_the_parts_and_the_front_doors_only():
    prism = ROOT / "prism"
    modules = {path.name for path in prism.glob("*.py")}
    packages = {path.name for path in prism.iterdir() if (path / "__init__.py").is_file()}
    assert modules - TOP_LEVEL_MODULES == set(), "a loose module at prism/'s top level: give it a package"
    assert modules == TOP_LEVEL_MODULES
    assert packages == set(TOP_LEVEL_PACKAGES)


def test_core_imports_nothing_of_prism_above_it():
    # prism.core is what every part may import; it importing a part would tie the parts together through it.
    graph = _import_graph()
    _, every = graph.build_graph(ROOT)
    core = {m for m in every if m.startswith("prism.core.")}
    outside = {(m, t) for m in core for t in every[m] if not t.startswith("prism.core.")}
    assert len(core) > 5 and outside == set()

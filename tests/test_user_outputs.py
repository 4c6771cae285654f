"""What a run leaves for its user: the loop package's own shape, output files and the closing block (issue 21)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _import_graph():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "tools" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_loop_has_no_import_circle_even_under_type_checking():
    """outputs.py and run.py share their types through prism.loop.members: no circle, not even a TYPE_CHECKING
    one (the runtime-only check of test_shape.py does not see those)."""
    tool = _import_graph()
    _, all_edges = tool.build_graph(ROOT)
    loop = {
        m: {d for d in deps if d.startswith("prism.loop")}
        for m, deps in all_edges.items()
        if m.startswith("prism.loop")
    }
    assert tool.cycles(loop) == []
    assert "prism.loop.run" not in all_edges["prism.loop.outputs"]


def test_population_default_run_dir_is_named_after_its_seeds_and_its_config_has_no_seed():
    from prism.config import load_config, to_yaml

    single = load_config([ROOT / "conf" / "hopper.yaml"], ["seed=3"])
    population = load_config([ROOT / "conf" / "hopper.yaml"], ["seeds=[0,1,2]"])
    assert single.run_dir == "runs/mo-hopper-v5/prism/seed3"
    assert population.run_dir == "runs/mo-hopper-v5/prism/seeds0-1-2"  # not .../seed0 (then seed0/seed0 …)
    text = to_yaml(population)
    assert "\nseed:" not in f"\n{text}" and "seeds:" in text
    assert "\nseed: 3" in f"\n{to_yaml(single)}"

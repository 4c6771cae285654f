"""Plug-ins from outside the package (issue 21, items 6 and 14): the entry-point group ``prism.plugins``,
class paths in the current folder, and the shaper's documented state methods."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from prism.config import load_config
from prism.registry import PLUGIN_GROUP, REWARDS

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"


def test_the_builtins_are_registered_by_prisms_own_entry_point():
    (own,) = [ep for ep in metadata.entry_points(group=PLUGIN_GROUP) if ep.dist.name == "prism-morl"]
    assert own.value == "prism.plugins:register"
    assert "none" in REWARDS and "resymnet" in REWARDS  # loaded through it
    # the registry names no plug-in module: it only reads the group
    source = (ROOT / "prism" / "registry.py").read_text()
    assert 'import_module("prism.plugins")' not in source and "from prism import plugins" not in source


def _install_fake_package(site: Path) -> None:
    """A package ``ext_linear`` with the documented linear reward model, registered by entry point, as
    ``pip install`` would leave it (a module and a ``dist-info`` folder on the path)."""
    blocks = re.findall(r"```python\n(.*?)```", ARCHITECTURE.read_text(), flags=re.S)
    (model,) = [b for b in blocks if b.startswith("# prism/reward/linear.py\n")]
    site.mkdir(parents=True, exist_ok=True)
    (site / "ext_linear.py").write_text(
        model
        + textwrap.dedent(
            """

            def register():
                from prism.registry import register_reward_model

                register_reward_model(
                    "linear", fit="ext_linear:fit_linear_reward", load="ext_linear:LinearRewardModel.from_dict"
                )
            """
        )
    )
    info = site / "ext_linear-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ext-linear\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{PLUGIN_GROUP}]\next_linear = ext_linear:register\n")


def test_an_installed_package_adds_a_reward_model_without_editing_prism(tmp_path):
    _install_fake_package(tmp_path / "site")
    code = textwrap.dedent(
        f"""
        from prism.config import load_config
        from prism.registry import REWARD_MODELS, REWARDS
        config = load_config([{str(CONF / "quickstart.yaml")!r}], ["env.id=prism/Toy-v0", "reward.name=linear"])
        entry = REWARD_MODELS.entry("reward.name", "linear")
        print(config.reward.name, REWARDS.entry("reward.name", "linear").model, entry.fit_fn().__name__)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["linear", "linear", "fit_linear_reward"]


def test_a_broken_entry_point_is_one_line_naming_it(tmp_path):
    site = tmp_path / "site"
    info = site / "broken-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{PLUGIN_GROUP}]\nbroken = no_such_module_xyz:register\n")
    code = "from prism.registry import AGENTS\nAGENTS.names()"
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "prism.plugins: entry point broken = no_such_module_xyz:register (from broken) failed to load" in (
        out.stderr
    )


def test_a_class_path_in_the_current_folder_needs_no_pythonpath(tmp_path, monkeypatch):
    (tmp_path / "myplug_cwd.py").write_text(
        "from prism.agents.capql import CAPQLModule\n\n\nclass MyAgent(CAPQLModule):\n    pass\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "myplug_cwd", raising=False)
    config = load_config([CONF / "quickstart.yaml"], ["agent.name=myplug_cwd:MyAgent"])
    assert config.agent.name == "myplug_cwd:MyAgent" and sys.modules["myplug_cwd"].__file__.startswith(
        str(tmp_path)
    )
    assert sys.path[-1] == str(tmp_path)  # appended: never shadows an installed package
    monkeypatch.delitem(sys.modules, "myplug_cwd")


def test_a_missing_module_inside_a_plugin_is_not_retried(tmp_path, monkeypatch):
    # Only the class path's own top-level module is looked for in the current folder; the plug-in's own
    # missing import is reported as it is.
    (tmp_path / "myplug_broken.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    from prism.config import ConfigError

    with pytest.raises(ConfigError, match="No module named 'no_such_dependency_xyz'"):
        load_config([CONF / "quickstart.yaml"], ["agent.name=myplug_broken:MyAgent"])
    sys.modules.pop("myplug_broken", None)


def test_the_shaper_protocol_documents_its_state_methods(caplog):
    from prism.loop import checkpoint
    from prism.reward.shaping import RewardShaper, make_shaper

    assert {"push", "reset", "state_dict", "load_state_dict"} <= set(vars(RewardShaper))
    (block,) = re.findall(r"class RewardShaper\(Protocol\):\n(.*?)```", ARCHITECTURE.read_text(), flags=re.S)
    assert "def state_dict(self) -> dict" in block and "def load_state_dict(self, state: dict)" in block
    for name in ("none", "uniform", "random"):  # every built-in implements all of it
        shaper = make_shaper(name, sparse_channel=1, seed=0)
        shaper.load_state_dict(shaper.state_dict())

    class NoState:
        def push(self, *args):
            return []

        def reset(self):
            pass

    with caplog.at_level(logging.WARNING, logger="prism.checkpoint"):
        assert checkpoint._shaper_state(NoState()) == {} and checkpoint._shaper_state(NoState()) == {}
    (record,) = caplog.records  # once per class
    assert record.getMessage().startswith("reward.name: warning: shaper ")
    assert "NoState has no state_dict()/load_state_dict()" in record.getMessage()


def _fake_distribution(site: Path, dist: str, entry: str, module: str, body: str) -> metadata.EntryPoint:
    """A distribution ``dist`` as pip would leave it on ``site`` (a module and its dist-info), declaring one
    entry point ``entry = module:register`` in the plug-in group; returns that entry point (its ``dist`` set)."""
    (site / f"{module}.py").write_text(textwrap.dedent(body))
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{PLUGIN_GROUP}]\n{entry} = {module}:register\n")
    (ep,) = metadata.PathDistribution(info).entry_points
    return ep


@pytest.fixture
def fake_plugin_group(tmp_path, monkeypatch):
    """Empty registries and a plug-in group made only of fake distributions built here (nothing installed
    counts): prism's own (``prism-morl``, registering ``shared``) and a third party's (``aaa-ext``, sorting
    before it by name, registering ``shared`` as well); both record when they run."""
    from prism import registry

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    calls: list[str] = []
    monkeypatch.setattr(registry, "_PLUGIN_CALLS", calls, raising=False)
    register = """
        from prism import registry

        def register():
            registry._PLUGIN_CALLS.append({who!r})
            registry.REWARDS.register("shared", shaper="{who}:shaper")
        """
    own = _fake_distribution(
        site, "prism-morl", "prism", "fake_prism_own", register.format(who="fake_prism_own")
    )
    ext = _fake_distribution(site, "aaa-ext", "aaa", "fake_aaa_ext", register.format(who="fake_aaa_ext"))
    # The third party listed first, as an installation may list it: the order must come from the rule.
    monkeypatch.setattr(
        registry.metadata, "entry_points", lambda group: [ext, own] if group == PLUGIN_GROUP else []
    )
    for table in (registry.AGENTS, registry.REWARDS, registry.REWARD_MODELS):
        monkeypatch.setattr(table, "_entries", {})
    monkeypatch.setattr(registry, "_PLUGINS_LOADED", False)
    monkeypatch.setattr(registry, "_PLUGINS_ERROR", None)
    for module in ("fake_prism_own", "fake_aaa_ext"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    return registry, calls


def test_prisms_own_entry_point_wins_over_a_third_party_one(fake_plugin_group):
    """The documented precedence (docs/ARCHITECTURE.md, "Plug-ins"; prism/registry.py): prism's own entry
    point is loaded first, whatever the distributions' names, and a name is registered once, so a third-party
    distribution cannot replace a built-in: its registration of a taken name stops the lookup with one line
    naming the third party's entry point, and the built-in's entry stays."""
    registry, calls = fake_plugin_group
    from prism.config import ConfigError

    assert [ep.dist.name for ep in registry._entry_points()] == ["prism-morl", "aaa-ext"]
    with pytest.raises(ConfigError) as err:
        registry.REWARDS.names()
    assert calls == ["fake_prism_own", "fake_aaa_ext"]
    message = str(err.value)
    assert "entry point aaa = fake_aaa_ext:register (from aaa-ext) failed to load" in message
    assert "'shared' is already registered" in message
    assert registry.REWARDS._entries["shared"].shaper == "fake_prism_own:shaper"

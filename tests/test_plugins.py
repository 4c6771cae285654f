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

import numpy as np
import pytest
from subprocess_runs import subprocess_env
from toy_runs import toy_run

from prism.config import load_config
from prism.plugins.registry import PLUGIN_GROUP, PLUGINS_ENV, REWARDS

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"


def test_the_builtins_are_registered_by_prisms_own_entry_point():
    (own,) = [ep for ep in metadata.entry_points(group=PLUGIN_GROUP) if ep.dist.name == "prism-morl"]
    assert own.value == "prism.plugins:register"
    assert "none" in REWARDS and "resymnet" in REWARDS  # loaded through it
    # the registry names no plug-in module: it only reads the group
    source = (ROOT / "prism" / "plugins" / "registry.py").read_text()
    assert (
        'import_module("prism.plugins.builtin")' not in source
        and "from prism.plugins import builtin" not in source
    )


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
                from prism.plugins.registry import register_reward_model

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
        from prism.plugins.registry import REWARD_MODELS, REWARDS
        config = load_config([{str(CONF / "quickstart.yaml")!r}], ["env.id=prism/Toy-v0", "reward.name=linear"])
        entry = REWARD_MODELS.entry("reward.name", "linear")
        print(config.reward.name, REWARDS.entry("reward.name", "linear").model, entry.fit_fn().__name__)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), PLUGINS_ENV: "prism-morl,ext-linear"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["linear", "linear", "fit_linear_reward"]


def test_a_broken_entry_point_is_one_line_naming_it(tmp_path):
    site = tmp_path / "site"
    info = site / "broken-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{PLUGIN_GROUP}]\nbroken = no_such_module_xyz:register\n")
    code = "from prism.plugins.registry import AGENTS\nAGENTS.names()"
    env = {**os.environ, "PYTHONPATH": str(site), PLUGINS_ENV: "prism-morl,broken"}
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
    from prism.reward.shapers import RewardShaper, make_shaper
    from prism.run import checkpoint

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


def _fake_plugin_distribution(
    site: Path, dist: str, entry: str, module: str, body: str
) -> metadata.EntryPoint:
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
    from prism.plugins import registry

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    calls: list[str] = []
    monkeypatch.setattr(registry, "_PLUGIN_CALLS", calls, raising=False)
    register = """
        from prism.plugins import registry

        def register():
            registry._PLUGIN_CALLS.append({who!r})
            registry.REWARDS.register("shared", shaper="{who}:shaper")
        """
    own = _fake_plugin_distribution(
        site, "prism-morl", "prism", "fake_prism_own", register.format(who="fake_prism_own")
    )
    ext = _fake_plugin_distribution(
        site, "aaa-ext", "aaa", "fake_aaa_ext", register.format(who="fake_aaa_ext")
    )
    # The third party listed first, as an installation may list it: the order must come from the rule.
    monkeypatch.setattr(
        registry.metadata, "entry_points", lambda group: [ext, own] if group == PLUGIN_GROUP else []
    )
    for table in (registry.AGENTS, registry.REWARDS, registry.REWARD_MODELS):
        monkeypatch.setattr(table, "_entries", {})
    monkeypatch.setattr(registry, "_PLUGINS_LOADED", False)
    monkeypatch.setattr(registry, "_PLUGINS_ERROR", None)
    monkeypatch.setenv(PLUGINS_ENV, "prism-morl,aaa-ext")  # both fake distributions may load
    for module in ("fake_prism_own", "fake_aaa_ext"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    return registry, calls


def test_prisms_own_entry_point_wins_over_a_third_party_one(fake_plugin_group):
    """The documented precedence (docs/ARCHITECTURE.md, "Plug-ins"; prism/plugins/registry.py): prism's own entry
    point is loaded first, whatever the distributions' names, and a name is registered once, so a third-party
    distribution cannot replace a built-in: its registration of a taken name stops the lookup with one line
    naming both distributions, prism's first, and the built-in's entry stays."""
    registry, calls = fake_plugin_group
    from prism.config import ConfigError

    assert [ep.dist.name for ep in registry._entry_points()] == ["prism-morl", "aaa-ext"]
    with pytest.raises(ConfigError) as err:
        registry.REWARDS.names()
    assert calls == ["fake_prism_own", "fake_aaa_ext"]
    message = str(err.value)
    assert message == (
        "prism.plugins: reward redistribution 'shared' is registered by two plug-ins, prism-morl and aaa-ext; "
        "uninstall one, or list the distributions to load in PRISM_PLUGINS"
    )
    assert registry.REWARDS._entries["shared"].shaper == "fake_prism_own:shaper"


def _fake_distribution(site: Path, dist: str, module: str, reward_name: str) -> None:
    """A distribution ``dist`` whose entry point registers a reward method ``reward_name`` (as pip leaves it)."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(
        "def register():\n    from prism.plugins.registry import REWARDS\n\n"
        f"    REWARDS.register({reward_name!r}, shaper='prism.reward.shapers:uniform_shaper')\n"
    )
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{PLUGIN_GROUP}]\n{module} = {module}:register\n")


def test_the_tests_load_only_prisms_own_plugins(tmp_path, monkeypatch):
    """Issue 29 item 10: an installed plug-in named `linear` made test_registry's doc example fail (the name
    was taken); the tests now load prism's entry point only, whatever else is installed."""
    from prism.plugins.registry import _dist_name, _entry_points

    _fake_distribution(tmp_path / "site", "ext-linear", "ext_linear_installed", "linear")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert "ext-linear" in {_dist_name(ep) for ep in metadata.entry_points(group=PLUGIN_GROUP)}
    assert {_dist_name(ep) for ep in _entry_points()} == {"prism-morl"}


def test_two_plugins_with_one_name_are_one_line_naming_both(tmp_path):
    site = tmp_path / "site"
    _fake_distribution(site, "alpha-shapers", "alpha_shapers", "smooth")
    _fake_distribution(site, "beta-shapers", "beta_shapers", "smooth")
    code = "from prism.cli import main\nraise SystemExit(main(['config', 'reward.name=smooth']))"
    env = {**os.environ, "PYTHONPATH": str(site)}
    del env[PLUGINS_ENV]  # every installed plug-in, as a user's environment has them
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "prism: error: prism.plugins: reward redistribution 'smooth' is registered by two plug-ins, "
        "alpha-shapers and beta-shapers; uninstall one, or list the distributions to load in PRISM_PLUGINS"
    ]


def _doc_block(language: str, first_line: str) -> str:
    """The ```<language> block of docs/ARCHITECTURE.md that starts with ``first_line``."""
    blocks = re.findall(rf"```{language}\n(.*?)```", ARCHITECTURE.read_text(), flags=re.S)
    (block,) = [b for b in blocks if b.startswith(first_line)]
    return block


def test_the_from_outside_prism_examples_are_complete_and_run(tmp_path, monkeypatch):
    """Issue 29 item 11: every block of "From outside prism" runs as written (imports included): the package
    `mypkg` built from them is found through its entry point, and the class-path shaper shapes a step."""
    import tomllib

    site = tmp_path / "site"
    (site / "mypkg").mkdir(parents=True)
    (site / "mypkg" / "__init__.py").write_text("")
    (site / "mypkg" / "linear.py").write_text(_doc_block("python", "# prism/reward/linear.py\n"))
    (site / "mypkg" / "plugins.py").write_text(_doc_block("python", "# mypkg/plugins.py\n"))
    pyproject = tomllib.loads(_doc_block("toml", '[project.entry-points."prism.plugins"]\nmypkg'))
    (name, value), *_ = pyproject["project"]["entry-points"][PLUGIN_GROUP].items()
    info = site / "mypkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mypkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{PLUGIN_GROUP}]\n{name} = {value}\n")
    code = textwrap.dedent(
        """
        from prism.plugins.registry import REWARD_MODELS, REWARDS
        entry = REWARD_MODELS.entry("reward.name", "linear")
        print(REWARDS.entry("reward.name", "linear").model, entry.fit_fn().__module__, entry.load_fn().__name__)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(site), PLUGINS_ENV: "prism-morl,mypkg"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["linear", "mypkg.linear", "from_dict"]

    # The class-path shaper, from the folder a command runs from: it clips the sparse channel ...
    (tmp_path / "myshaper.py").write_text(_doc_block("python", "# myshaper.py\n"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "myshaper", raising=False)
    from prism.reward.shapers import make_shaper

    shaper = make_shaper("myshaper:ClippedShaper", sparse_channel=0, seed=0)
    obs, weight = np.zeros(2, np.float32), np.full(2, 0.5, np.float32)
    (stored,) = shaper.push(obs, np.zeros(1), np.array([25.0, -30.0]), obs, False, True, weight, True)
    assert stored.reward.tolist() == [10.0, -30.0] and stored.terminated is False
    sys.modules.pop("myshaper", None)


@pytest.mark.slow  # a toy run in a child process (~1 min on a busy core)
def test_the_documented_class_path_shaper_trains_a_run(tmp_path):
    (tmp_path / "myshaper.py").write_text(_doc_block("python", "# myshaper.py\n"))
    cmd = [sys.executable, "-m", "prism.cli", "fit", "--config", str(CONF / "quickstart.yaml")]
    cmd += [
        *toy_run(resymnet=False),
        "reward.name=myshaper:ClippedShaper",
        f"run_dir={tmp_path / 'run'}",
        "figures=false",
    ]
    out = subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "run" / "summary.json").is_file()

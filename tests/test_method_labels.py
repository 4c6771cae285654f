"""``method`` names what a run is, ``method_label`` is the free label (issue 29, item 9; prism/config/methods.py).

The expected names are written here from the paper's arms (docs/method.md §8): oracle = the dense env with no
reward model and no SymReg, baseline = the sparse env the same way, PRISM = ReSymNet with SymReg, w/o loss =
ReSymNet with λ = 0, uniform / random = their redistributions.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest
import yaml

from prism.config import BUILTIN_METHODS, ConfigError, load_config, load_run_config, run_label, to_yaml
from prism.experiments.grid import CONF
from prism.experiments.runner import Job, fit_command
from prism.experiments.studies import load_preset, shipped
from prism.plugins.registry import REWARD_MODELS, REWARDS, register_reward_model

QUICKSTART = CONF / "quickstart.yaml"
RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


@pytest.mark.parametrize(
    ("overrides", "method"),
    [
        ([], "prism"),  # ReSymNet, λ null = the env's λ
        (["agent.symreg_lambda=0.05"], "prism"),
        (["agent.symreg_lambda=0"], "wo_loss"),
        (["agent.symmetry_mode=none"], "wo_loss"),  # no symmetry at all, whatever λ says
        (["agent.symmetry_mode=exact"], "prism"),  # the exactly equivariant actor
        (["reward.name=uniform"], "uniform"),
        (["reward.name=random", "agent.symreg_lambda=0"], "random"),
        (["reward.name=none", "agent.symreg_lambda=0"], "baseline"),
        (["reward.name=none"], "baseline+symreg"),
        (["env.dense=true", "reward.name=none", "agent.symreg_lambda=0"], "oracle"),
        (["env.dense=true", "reward.name=none"], "oracle+symreg"),
    ],
)
def test_a_config_without_method_gets_the_name_its_keys_make(overrides, method):
    config = load_config([QUICKSTART], overrides)
    assert config.method == method and config.method_label is None and run_label(config) == method
    assert Path(config.run_dir).parts == ("runs", "mo-hopper-v5", method, "seed0")


@pytest.mark.parametrize(
    "overlay", sorted((CONF / "method").glob("*.yaml")) + sorted((CONF / "ablation").glob("*.yaml"))
)
def test_every_shipped_overlay_names_a_method_its_keys_agree_with(overlay):
    named = yaml.safe_load(overlay.read_text())["method"]
    for env_file in ("quickstart", "walker"):
        config = load_config([CONF / f"{env_file}.yaml", overlay])
        assert config.method == named and named in BUILTIN_METHODS


@pytest.mark.parametrize(
    ("overrides", "start"),
    [
        # the case: ReSymNet trains, and baseline would file PRISM under baseline
        (["method=baseline"], "method: baseline means env.dense=false, reward.name=none and no SymReg"),
        # the sparse env without a reward model, but SymReg on: baseline+symreg, not baseline
        (
            ["method=baseline", "reward.name=none", "agent.symreg_lambda=1"],
            "method: baseline means env.dense=false, reward.name=none and no SymReg",
        ),
        (["method=wo_loss"], "method: wo_loss means reward.name=resymnet without SymReg"),
        (
            ["method=prism", "agent.symreg_lambda=0"],
            "method: prism means reward.name=resymnet with SymReg on",
        ),
        (["method=prism", "reward.name=uniform"], "method: prism means"),
        (
            ["method=oracle", "reward.name=none", "agent.symreg_lambda=0"],
            "method: oracle means env.dense=true",
        ),
        (
            ["method=wo_ensemble"],
            "method: wo_ensemble means reward.name=resymnet with reward.ensemble_size=1",
        ),
        (["method=sparse_cost"], "method: sparse_cost means the last reward channel hidden"),
    ],
)
def test_a_built_in_method_its_keys_contradict_is_refused_in_one_line(overrides, start):
    with pytest.raises(ConfigError) as err:
        load_config([QUICKSTART], overrides)
    message = str(err.value)
    assert message.startswith(start) and "\n" not in message
    assert "method_label=<label>" in message


@pytest.mark.parametrize(("dense", "method"), [("false", "baseline"), ("true", "oracle")])
def test_under_the_released_protocol_a_reward_free_arm_is_named_without_symreg(dense, method):
    """The released protocol runs oracle and baseline without SymReg whatever the env file's λ (0.01 on hopper):
    the derived name says so, and the protocol's λ = 0 then agrees with it."""
    config = load_config(
        [CONF / "hopper.yaml"], [f"env.dense={dense}", "reward.name=none", "protocol=released"]
    )
    assert (config.method, config.agent.symreg_lambda) == (method, 0.0)
    assert Path(config.run_dir).parts[2] == method
    assert load_config([CONF / "hopper.yaml"], [f"env.dense={dense}", "reward.name=none"]).method == (
        f"{method}+symreg"
    )


def test_the_keys_a_built_in_method_needs_make_it_load():
    assert load_config([QUICKSTART], ["method=wo_ensemble", "reward.ensemble_size=1"]).method == "wo_ensemble"
    assert load_config([QUICKSTART], ["method=sparse_cost", "env.sparse_channel=-1"]).method == "sparse_cost"
    assert load_config([QUICKSTART], ["method=uniform", "reward.name=uniform"]).method == "uniform"


def test_an_unknown_method_is_refused_and_points_to_method_label():
    with pytest.raises(ConfigError, match=r"^method: unknown method 'prsm' \(built-in: oracle, ") as err:
        load_config([QUICKSTART], ["method=prsm"])
    assert "set method_label=prsm and leave method out" in str(err.value)


def test_method_label_files_the_run_under_a_label_of_ones_own():
    config = load_config([QUICKSTART], ["method_label=prism-lr1e-3"])
    assert (config.method, run_label(config)) == ("prism", "prism-lr1e-3")
    assert Path(config.run_dir).parts[-2] == "prism-lr1e-3"
    assert run_label(load_config([QUICKSTART], ["method_label=prism"])) == "prism"  # its own name is fine
    with pytest.raises(ConfigError, match=r"^method_label: 'baseline' is the built-in method baseline, and"):
        load_config([QUICKSTART], ["method_label=baseline"])  # a label may not pass for another method
    with pytest.raises(ConfigError, match=r"^method_label: must be a non-empty name without '/'"):
        load_config([QUICKSTART], ["method_label=a/b"])


@pytest.fixture()
def plugin_reward():
    register_reward_model("my_reward", fit=lambda store, config: None, load=lambda state: None)
    yield "my_reward"
    REWARDS.unregister("my_reward")
    REWARD_MODELS.unregister("my_reward")


def test_a_plug_in_reward_model_is_a_method_of_its_own_name(plugin_reward):
    assert load_config([QUICKSTART], [f"reward.name={plugin_reward}"]).method == plugin_reward
    assert load_config([QUICKSTART], [f"reward.name={plugin_reward}", f"method={plugin_reward}"]).method == (
        plugin_reward
    )
    with pytest.raises(ConfigError, match=r"^method: unknown method 'my_reward'"):
        load_config([QUICKSTART], [f"method={plugin_reward}"])  # ReSymNet runs: not the plug-in's method


def test_every_preset_arm_resolves_to_its_own_label_and_a_method_that_agrees(tmp_path):
    """What `prism reproduce` runs: each arm's command loads (its method agrees) and files under the arm."""
    checked = 0
    for name in shipped():
        preset = load_preset(name)
        for env in preset.envs:
            for arm_name in preset.methods_for(env):
                arm = preset.arm(arm_name)
                args = fit_command(Job(env, arm_name, (0,), False), preset, tmp_path)
                args = args[args.index("--config") + 1 :]
                files = [a for a in args if a.endswith(".yaml") and "=" not in a]
                config = load_config(files, [a for a in args if "=" in a])
                assert run_label(config) == arm_name, (name, env, arm_name)
                assert config.method in BUILTIN_METHODS, (name, env, arm_name)
                assert config.method.split("+")[0] == arm.method, (name, env, arm_name)
                checked += 1
    assert checked >= 20


def _committed_run_configs() -> list[Path]:
    """The config.yaml of every committed, finished run folder: git's tracked files (a run still going, or one
    finished and not yet committed, is not the repository's), every one on disk outside git."""
    pattern = "docs/results/*/runs/*/*/seed*/config.yaml"
    try:
        tracked = subprocess.run(
            ["git", "ls-files", "--", pattern],
            cwd=RESULTS.parents[1],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        paths = [RESULTS.parents[1] / name for name in tracked]
    except (OSError, subprocess.CalledProcessError):
        paths = list(RESULTS.glob("*/runs/*/*/seed*/config.yaml"))
    return sorted(p for p in paths if (p.parent / "summary.json").is_file())


def test_every_committed_run_folder_still_loads_with_its_arm_as_label():
    """Run folders written before the split carry the arm in ``method`` (``method: e-prism``): loaded as a run
    record, the arm becomes the label and the method is derived from the keys."""
    finished = _committed_run_configs()
    configs = list(
        {p.parent.parent: p for p in reversed(finished)}.values()
    )  # one per arm folder: its first seed
    assert len(configs) >= 10
    for path in configs:
        config = load_run_config(path)
        arm = path.parent.parent.name
        assert run_label(config) == arm, path
        assert config.method in BUILTIN_METHODS, path
        if "method_label" not in yaml.safe_load(path.read_text()):  # written before the split
            with pytest.raises(ConfigError, match=r"^method: unknown method"):
                load_config([path])  # as a plain config file, an arm name in `method` is refused


def test_a_record_with_a_built_in_name_its_keys_contradict_loads_with_that_name_as_label(tmp_path):
    record = tmp_path / "config.yaml"
    text = yaml.safe_dump({"method": "baseline", "reward": {"name": "resymnet"}, "run_dir": str(tmp_path)})
    record.write_text(text)
    config = load_run_config(record)
    assert (config.method, config.method_label) == ("prism", "baseline")
    with pytest.raises(ConfigError, match=r"^method: baseline means"):
        load_config([record])


@pytest.mark.parametrize(("env_file", "last", "other"), [("walker", 1, 0), ("hopper", 2, 1)])
def test_sparse_cost_takes_the_last_channels_index_as_well_as_minus_one(env_file, last, other):
    """``env.sparse_channel`` names the same channel as −1 by its index n − 1 (walker2d 2 objectives, hopper 3);
    any other channel is not the cost channel and is refused in one line."""
    files = [CONF / f"{env_file}.yaml"]
    for channel in (-1, last):
        config = load_config(files, ["method=sparse_cost", f"env.sparse_channel={channel}"])
        assert config.method == "sparse_cost"
    with pytest.raises(ConfigError, match=r"^method: sparse_cost means the last reward channel hidden"):
        load_config(files, ["method=sparse_cost", f"env.sparse_channel={other}"])


def test_a_sparse_cost_record_written_with_the_last_channels_index_keeps_its_method(tmp_path):
    """A run folder of ``method=sparse_cost`` with ``env.sparse_channel=n-1`` (walker2d: 1) loads as
    sparse_cost, as the same keys load from a config file: the record is not relabelled as if the keys
    contradicted it (they contradict ``sparse_cost`` only while the env's objective count is unknown)."""
    record = tmp_path / "config.yaml"
    walker = yaml.safe_load((CONF / "walker.yaml").read_text())["env"]["id"]
    saved = {"method": "sparse_cost", "env": {"id": walker, "sparse_channel": 1}, "run_dir": str(tmp_path)}
    record.write_text(yaml.safe_dump(saved))
    for config in (load_config([record]), load_run_config(record)):
        assert (config.method, config.method_label) == ("sparse_cost", None)


@pytest.mark.parametrize(
    "overrides",
    [
        ["method=resymnet"],  # ReSymNet's reward name: the method is prism (or wo_loss)
        ["method=none", "reward.name=none"],  # no reward model: baseline (or oracle)
    ],
)
def test_a_built_in_reward_name_beside_the_same_reward_name_is_not_a_method(overrides):
    """A plug-in reward's name names its method; a built-in reward's name does not, even beside the same
    ``reward.name`` (the method is the arm it makes: prism, baseline, ...)."""
    name = overrides[0].removeprefix("method=")
    with pytest.raises(ConfigError, match=rf"^method: unknown method '{name}' \(built-in: ") as err:
        load_config([QUICKSTART], overrides)
    assert "\n" not in str(err.value) and f"set method_label={name} and leave method out" in str(err.value)


def test_a_wo_loss_record_from_an_env_without_a_symmetry_table_keeps_its_method(
    tmp_path, caplog, monkeypatch
):
    """A PRISM run on an env without a symmetry table is wo_loss (its λ, left to the spec, is 0) and its
    config.yaml says so, with λ still null as written: read back, it stays wo_loss, not prism labelled
    wo_loss, and a resume's warning says the run is filed as wo_loss, not that it "trains as wo_loss" as if
    it were another method."""
    config = load_config([CONF / "quickstart.yaml"], ["env.id=mo-hopper-2obj-v5", f"run_dir={tmp_path}"])
    assert config.method == "wo_loss"
    record = tmp_path / "config.yaml"
    record.write_text(to_yaml(config))
    assert "symreg_lambda: null" in record.read_text()
    monkeypatch.setattr("prism.config.agent_keys._WARNED", set())  # each warning is logged once per process
    caplog.clear()  # what load_config said above
    with caplog.at_level(logging.WARNING, logger="prism.config"):
        loaded = load_run_config(record)
    assert (loaded.method, loaded.method_label) == ("wo_loss", None)
    warned = [r.message for r in caplog.records if "SymReg is off" in r.message]
    assert len(warned) == 1 and "the run is filed as wo_loss;" in warned[0], warned
    assert "trains as" not in warned[0]

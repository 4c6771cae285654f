"""Plug-in registries and config groups (issue 13): one registry entry per plug-in, `agent.name` selects the
backbone's own keys, validation once per dataclass, and the worked examples of docs/ARCHITECTURE.md run."""

from __future__ import annotations

import dataclasses
import re
import sys
import types
from pathlib import Path

import pytest
import torch
import yaml

from prism.agents.config import CAPQLConfig, OffPolicyConfig
from prism.config import ConfigError, RunConfig, load_config, load_run_config, validate
from prism.data.segments import SegmentStore
from prism.envs import TOY_SPEC
from prism.plugins.registry import AGENTS, REWARD_MODELS, REWARDS, register_reward_model
from prism.reward.config import ReSymNetConfig

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
TOY = [
    "env.id=prism/Toy-v0",
    "loop.initial_episodes=4",
    "loop.expert_episodes=2",
    "loop.cycles=2",
    "loop.steps_per_cycle=150",
    "loop.checkpoint_every=150",
    "reward.max_epochs=2",
    "agent.learning_starts=50",
    "agent.batch_size=16",
    "agent.buffer_size=1000",
    "agent.log_every=50",
    "eval.every=150",
    "eval.num_weights=3",
    "eval.episodes=1",
    "eval.final.num_weights=3",
    "eval.final.episodes=1",
    "eval.num_workers=0",
    "figures=false",
]


def _doc_module(first_line: str) -> types.ModuleType:
    """Import the ```python block of docs/ARCHITECTURE.md that starts with ``first_line`` as a module."""
    blocks = re.findall(r"```python\n(.*?)```", ARCHITECTURE.read_text(), flags=re.S)
    (source,) = [b for b in blocks if b.startswith(first_line + "\n")]
    name = f"prism_doc_example_{first_line.rsplit('/', 1)[-1].removesuffix('.py')}"
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses look their module up while the class is created
    exec(compile(source, f"{ARCHITECTURE}:{first_line}", "exec"), module.__dict__)
    return module


def _doc_registration(pattern: str) -> str:
    """The registration line(s) the doc puts in prism/plugins/builtin.py (checked to name the example's objects)."""
    blocks = re.findall(r"```python\n(.*?)```", ARCHITECTURE.read_text(), flags=re.S)
    (block,) = [b for b in blocks if pattern in b and not b.startswith("#")]
    return block


# ---- the registries ------------------------------------------------------------------------------------
def test_every_builtin_is_registered_once_with_its_config_and_model():
    assert AGENTS.names() == ["capql", "gpi_pd"]
    capql = AGENTS.entry("agent.name", "capql")
    assert capql.config_class() is CAPQLConfig and capql.agent_class().config_class is CAPQLConfig
    from prism.agents.gpi_pd.config import GPIPDConfig

    assert AGENTS.entry("agent.name", "gpi_pd").config_class() is GPIPDConfig
    assert {e.name: e.model for e in REWARDS} == {
        "none": None,
        "random": None,
        "resymnet": "resymnet",
        "rrd": "rrd",
        "uniform": None,
    }
    from prism.reward.models.resymnet import ReSymNetRewardModel
    from prism.reward.models.resymnet_fit import fit_resymnet_model

    resymnet = REWARD_MODELS.entry("reward.name", "resymnet")
    assert resymnet.fitter_fn() is fit_resymnet_model and resymnet.load_fn() == ReSymNetRewardModel.from_dict
    with pytest.raises(ValueError, match="already registered"):
        AGENTS.register("capql", factory="prism.agents.capql:CAPQLModule", config=CAPQLConfig)


def test_plugin_code_does_not_name_capql_or_resymnet():
    """The run, the loop and the checkpointer look plug-ins up; only prism/plugins/builtin.py names the built-ins."""
    for path in (
        "prism/run/fit.py",
        "prism/loop/phases.py",
        "prism/loop/fit_phase.py",
        "prism/run/checkpoint.py",
    ):
        source = (ROOT / path).read_text()
        code = "\n".join(line.split("#")[0] for line in source.splitlines())
        assert not re.search(r"CAPQL|ReSymNetRewardModel|fit_resymnet_model|\"resymnet\"|\"capql\"", code), (
            path
        )


# ---- config groups -------------------------------------------------------------------------------------
def test_agent_group_file_is_an_overlay_that_lists_capqls_keys():
    base = load_config([CONF / "hopper.yaml"])
    with_group = load_config([CONF / "hopper.yaml", CONF / "agent" / "capql.yaml"])
    assert type(with_group.agent) is CAPQLConfig and with_group == base
    group_keys = set(yaml.safe_load((CONF / "agent" / "capql.yaml").read_text())["agent"])
    # every CAPQL key but symreg_lambda (left to the env file / spec) is documented in the group file
    assert group_keys == {f.name for f in dataclasses.fields(CAPQLConfig)} - {"symreg_lambda"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["agent.foo=1"], "agent.foo: Key 'foo' not in 'CAPQLConfig'"),
        (["agent.gamma=0"], "agent.gamma: must lie in (0, 1], got 0.0"),
        (["agent.seed=3"], "agent.seed: not an agent key; set the run's top-level `seed`"),
        (["agent.device=cpu"], "agent.device: not an agent key; set the run's top-level `device`"),
        (["agent.buffer_size=8"], "agent.buffer_size: must be at least agent.batch_size (128), got 8"),
        (["reward.dropout=1.0"], "reward.dropout: must lie in [0, 1), got 1.0"),
        (["env.p_rel=1.5"], "env.p_rel: must lie in [0, 1], got 1.5"),
        (["eval.final.episodes=0"], "eval.final.episodes: must be positive, got 0"),
    ],
)
def test_each_dataclass_refuses_its_own_bad_values_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as info:
        load_config([CONF / "hopper.yaml"], overrides)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_the_same_rule_applies_to_a_dataclass_built_in_python():
    # Before, AgentConfig(gamma=0) was accepted while the YAML loader refused agent.gamma=0.
    with pytest.raises(ValueError, match=r"^agent\.gamma: must lie in \(0, 1\]"):
        CAPQLConfig(gamma=0.0)
    assert CAPQLConfig(gamma=1.0).gamma == 1.0
    with pytest.raises(ValueError, match=r"^reward\.name: unknown reward redistribution 'magic'"):
        ReSymNetConfig(name="magic")
    assert not hasattr(CAPQLConfig(), "seed") and not hasattr(CAPQLConfig(), "device")


def test_a_config_built_in_python_must_pair_the_name_with_its_backbones_dataclass():
    config = RunConfig(agent=OffPolicyConfig(name="capql"))
    with pytest.raises(ConfigError, match="^agent.name: 'capql' takes a CAPQLConfig, got a OffPolicyConfig"):
        validate(config)


def test_old_run_folders_with_agent_seed_and_device_defaults_still_load(tmp_path):
    saved = tmp_path / "config.yaml"
    saved.write_text("agent:\n  seed: null\n  device: auto\n  gamma: 0.9\n")
    assert load_config([CONF / "hopper.yaml", saved]).agent.gamma == 0.9


# ---- worked example: a reward model --------------------------------------------------------------------
@pytest.fixture()
def linear_reward_model():
    module = _doc_module("# prism/reward/linear.py")
    registration = _doc_registration('register_reward_model(\n    "linear"')
    assert "prism.reward.linear:fit_linear_reward" in registration
    assert "prism.reward.linear:LinearRewardModel.from_dict" in registration
    register_reward_model(
        "linear",
        fit=module.fit_linear_reward,
        load=module.LinearRewardModel.from_dict,
        config=module.LinearConfig,
    )
    yield module
    REWARDS.unregister("linear")
    REWARD_MODELS.unregister("linear")


def test_linear_reward_model_recovers_a_linear_per_step_reward(linear_reward_model):
    """Closed-form check: segment sums of a per-step reward that is linear in h_t identify θ."""
    gen = torch.Generator().manual_seed(0)
    theta, bias = torch.tensor([0.5, -1.0, 2.0, 0.25]), 0.3
    store = SegmentStore(obs_dim=2, act_dim=1, n_dense=1)
    for _ in range(60):
        length = int(torch.randint(3, 12, (1,), generator=gen))
        feats = torch.randn(length, 4, generator=gen)
        true = feats @ theta + bias
        released = torch.zeros(length, dtype=torch.bool)
        released[length // 2], released[-1] = True, True
        emitted = torch.zeros(length)
        emitted[length // 2] = true[: length // 2 + 1].sum()
        emitted[-1] = true[length // 2 + 1 :].sum()
        store.add_episode(feats, released, emitted, true)
    model = linear_reward_model.fit_linear_reward(store, linear_reward_model.LinearConfig(ridge=0.0))
    torch.testing.assert_close(model.weight, torch.cat([theta, torch.tensor([bias])]), atol=1e-4, rtol=0)
    again = REWARD_MODELS.entry("reward.name", "linear").load_fn()(model.to_dict())
    torch.testing.assert_close(again.predict(store.features), model.predict(store.features))


def test_linear_reward_model_runs_through_the_loop_and_checkpoints(linear_reward_model, tmp_path):
    from prism.run.checkpoint import collect_state, restore_state
    from prism.run.fit import fit_run

    run = fit_run(
        [str(CONF / "quickstart.yaml")], [*TOY, "reward.name=linear", f"run_dir={tmp_path / 'run'}"]
    )
    assert run.loop.settings.reward_model == "linear" and run.loop.state.fits == 2
    model = run.loop.model
    assert type(model) is linear_reward_model.LinearRewardModel and run.agent.shaper.model is model
    # the shaped sparse channel in the buffer is the model's prediction, not the emitted zeros
    assert (run.agent.buffer.all().reward[:, TOY_SPEC.sparse_channel] != 0).float().mean() > 0.9
    # a checkpoint's model comes back through the registry's load (a new object, the same weights)
    restore_state(run, collect_state(run))
    assert run.loop.model is not model and torch.equal(run.loop.model.weight, model.weight)
    assert run.agent.shaper.model is run.loop.model


# ---- worked example: a backbone ------------------------------------------------------------------------
@pytest.fixture()
def ddpg():
    module = _doc_module("# prism/agents/ddpg.py")
    registration = _doc_registration('AGENTS.register("ddpg"')
    assert "prism.agents.ddpg:DDPGModule" in registration and "prism.agents.ddpg:DDPGConfig" in registration
    AGENTS.register("ddpg", factory=module.DDPGModule, config=module.DDPGConfig)
    yield module
    AGENTS.unregister("ddpg")


def test_agent_name_selects_the_backbones_own_keys(ddpg):
    config = load_config([CONF / "quickstart.yaml"], ["agent.name=ddpg", "agent.hidden=[32,32]"])
    assert type(config.agent) is ddpg.DDPGConfig and config.agent.hidden == [32, 32]
    assert config.agent.learning_starts == 500  # the shared off-policy keys of quickstart.yaml apply
    with pytest.raises(ConfigError, match=r"^agent.hidden: Key 'hidden' not in 'CAPQLConfig'"):
        load_config([CONF / "quickstart.yaml"], ["agent.hidden=[32,32]"])
    with pytest.raises(ConfigError, match=r"^agent.actor_hidden: Key 'actor_hidden' not in 'DDPGConfig'"):
        load_config([CONF / "quickstart.yaml"], ["agent.name=ddpg", "agent.actor_hidden=[32]"])
    with pytest.raises(ConfigError, match=r"^agent.gamma: must lie in \(0, 1\]"):
        load_config([CONF / "quickstart.yaml"], ["agent.name=ddpg", "agent.gamma=0"])


def test_ddpg_backbone_trains_through_the_run(ddpg, tmp_path):
    from prism.run.fit import fit_run

    run_dir = tmp_path / "run"
    run = fit_run(
        [str(CONF / "quickstart.yaml")],
        [*TOY, "reward.name=none", "agent.name=ddpg", "agent.hidden=[16]", f"run_dir={run_dir}"],
    )
    agent = run.agent
    assert type(agent) is ddpg.DDPGModule and agent.n_updates == 300 - 50 + 1
    assert agent.seeds == (0,) and (run_dir / "eval.csv").is_file() and (run_dir / "summary.json").is_file()
    # the critic learned and its target followed by Polyak steps (moved from the initial copy, not equal)
    assert any(
        not torch.equal(c, t) for c, t in zip(agent.critic.parameters(), agent.critic_target.parameters())
    )
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["agent"]["name"] == "ddpg" and saved["agent"]["hidden"] == [16]


# ---- method overlays on a backbone without SymReg (issue 21, item 7) -----------------------------------
@pytest.fixture()
def config_warnings(monkeypatch, caplog):
    monkeypatch.setattr("prism.config.agent_keys._WARNED", set())  # each warning is logged once per process
    caplog.set_level("WARNING", logger="prism.config")
    return caplog


@pytest.mark.parametrize("method", ["baseline", "oracle", "prism"])
def test_every_method_overlay_composes_with_a_backbone_without_symreg(ddpg, config_warnings, method):
    overlay = CONF / "method" / f"{method}.yaml"
    config = load_config([CONF / "quickstart.yaml", overlay], ["agent.name=ddpg"])
    assert type(config.agent) is ddpg.DDPGConfig and config.method == method
    messages = [r.getMessage() for r in config_warnings.records]
    assert messages[0] == (
        f"agent.symreg_lambda: warning: skipped: {overlay} sets it, but backbone 'ddpg' has no such key "
        "(it is a key of capql, gpi_pd)"
    )
    assert len(messages) == (2 if method == "prism" else 1)


def test_a_run_labelled_prism_on_a_backbone_without_symreg_warns_once(ddpg, config_warnings):
    load_config([CONF / "quickstart.yaml"], ["agent.name=ddpg", "method=prism"])
    load_config([CONF / "quickstart.yaml"], ["agent.name=ddpg", "method=prism"])
    (record,) = config_warnings.records
    assert record.getMessage().startswith(
        "method: warning: the run is labelled prism (ReSymNet + SymReg) but backbone 'ddpg' has no SymReg"
    )
    assert "leave method out (it is then wo_loss)" in record.getMessage()
    # left out, the method is derived: ReSymNet without SymReg is "w/o loss", and nothing warns
    assert load_config([CONF / "quickstart.yaml"], ["agent.name=ddpg"]).method == "wo_loss"
    load_config([CONF / "quickstart.yaml"], ["agent.name=ddpg", "method_label=resymnet_only"])
    assert load_config([CONF / "quickstart.yaml"]).method == "prism"  # capql has SymReg
    assert len(config_warnings.records) == 1


def test_foreign_agent_keys_are_skipped_only_in_files_and_typos_still_refused(ddpg, tmp_path):
    # An override is typed for this run: still refused.
    with pytest.raises(ConfigError, match=r"^agent.symreg_lambda: Key 'symreg_lambda' not in 'DDPGConfig'"):
        load_config([CONF / "quickstart.yaml"], ["agent.name=ddpg", "agent.symreg_lambda=0"])
    typo = tmp_path / "typo.yaml"
    typo.write_text("agent:\n  gama: 0.9\n")  # no backbone has it
    with pytest.raises(ConfigError, match=r"^agent.gama: Key 'gama' not in 'DDPGConfig'"):
        load_config([CONF / "quickstart.yaml", typo], ["agent.name=ddpg"])
    # the paper's env files (which pin CAPQL's λ) now compose with ddpg too
    assert type(load_config([CONF / "hopper.yaml"], ["agent.name=ddpg"]).agent) is ddpg.DDPGConfig


# ---- budget keys: conf/budget/tiny.yaml sizes GPI-PD and still composes with CAPQL (issue 50, item 2) --------
def test_the_tiny_budget_makes_gpi_pd_tiny_and_composes_with_capql_without_a_warning(config_warnings):
    tiny = CONF / "budget" / "tiny.yaml"
    gpi = load_config([CONF / "hopper.yaml", CONF / "agent" / "gpi_pd.yaml", tiny]).agent
    loop = load_config([CONF / "hopper.yaml", CONF / "agent" / "gpi_pd.yaml", tiny]).loop
    total_steps = loop.cycles * loop.steps_per_cycle
    # What made its two 300-step RL phases take minutes: 20 updates per env step (12 000 in all).
    assert gpi.gradient_updates * total_steps <= 1_000
    # ... and every GPI-PD mechanism still runs inside the tiny run: a GPI-LS iteration, Dyna fits and rollouts
    assert gpi.timesteps_per_iter <= loop.steps_per_cycle and gpi.eval_episodes_per_weight == 1
    assert gpi.learning_starts + gpi.dynamics_train_freq <= total_steps
    assert gpi.dynamics_rollout_starts < total_steps and gpi.dynamics_rollout_batch_size <= 1_000
    # CAPQL has none of those keys: the budget file still composes with it, silently
    capql = load_config([CONF / "hopper.yaml", tiny]).agent
    assert type(capql).__name__ == "CAPQLConfig" and capql.learning_starts == 100
    assert config_warnings.records == []


def test_only_budget_keys_are_skipped_silently_and_overrides_still_refused(config_warnings, tmp_path):
    # typed on the command line for this run: refused, naming the backbone that has the key
    with pytest.raises(ConfigError, match=r"^agent.gradient_updates: .*it is a key of gpi_pd"):
        load_config([CONF / "quickstart.yaml"], ["agent.gradient_updates=1"])
    # a GPI-PD key that is not a budget key (it changes the method) still warns when skipped
    overlay = tmp_path / "per.yaml"
    overlay.write_text("agent:\n  per: false\n")
    load_config([CONF / "quickstart.yaml", overlay])
    (record,) = config_warnings.records
    assert record.getMessage().startswith(f"agent.per: warning: skipped: {overlay} sets it")


def test_another_reward_models_keys_warn_in_a_file_load_silently_from_a_record_and_are_refused_as_overrides(
    config_warnings, tmp_path
):
    """``reward.hidden`` (ReSymNet's) beside ``reward.name: rrd``: a config file's is skipped with one warning
    naming the key, the file and its owner; a run folder's record (every run before ``reward:`` was typed wrote
    every model's keys) drops it silently; an override is refused; a key no model has is refused everywhere."""
    overlay = tmp_path / "rrd_wide.yaml"
    overlay.write_text("reward:\n  name: rrd\n  hidden: 64\n  lr: 0.001\n")
    config = load_config([CONF / "quickstart.yaml", overlay])
    assert config.reward.name == "rrd" and not hasattr(config.reward, "hidden")
    messages = sorted(r.getMessage() for r in config_warnings.records)
    assert messages == [
        f"reward.{key}: warning: skipped: {overlay} sets it, but reward.name=rrd has no such key "
        "(it is a key of resymnet)"
        for key in ("hidden", "lr")
    ]
    config_warnings.clear()
    record = tmp_path / "run" / "config.yaml"
    record.parent.mkdir()
    quickstart = (CONF / "quickstart.yaml").read_text()
    record.write_text(quickstart.replace("  name: resymnet\n", "  name: rrd\n  hidden: 64\n  lr: 0.001\n", 1))
    assert load_run_config(record).reward.name == "rrd"
    assert config_warnings.records == []
    with pytest.raises(
        ConfigError, match=r"^reward.hidden: .*it is a key of resymnet \(reward.name=resymnet\)$"
    ):
        load_config([CONF / "quickstart.yaml"], ["reward.name=rrd", "reward.hidden=64"])
    typo = tmp_path / "typo.yaml"
    typo.write_text("reward:\n  hiden: 64\n")
    with pytest.raises(ConfigError, match=r"^reward.hiden: Key 'hiden' not in 'ReSymNetConfig'"):
        load_config([CONF / "quickstart.yaml", typo])


def test_a_reward_model_whose_config_is_not_a_reward_config_is_refused_in_one_line():
    """A plug-in's ``config=`` must extend :class:`RewardConfig` (the shared fit keys every fit reads)."""
    import dataclasses

    @dataclasses.dataclass
    class Loose:
        name: str = "loose"

    register_reward_model("loose", fit=lambda store, config: None, load=lambda state: None, config=Loose)
    try:
        with pytest.raises(
            ConfigError, match=r"^reward.name: the config class of reward model 'loose' is not a "
        ):
            load_config([CONF / "quickstart.yaml"], ["reward.name=loose"])
    finally:
        REWARD_MODELS.unregister("loose")
        REWARDS.unregister("loose")

"""Config tier: every shipped file loads; overlays change what they should and nothing else; bad input."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from prism.config import ConfigError, RunConfig, load_config, resolve_env_spec, sparse_channel, to_yaml

CONF = Path(__file__).resolve().parents[1] / "conf"
ENV_FILES = sorted(p for p in CONF.glob("*.yaml") if p.name != "quickstart.yaml")
OVERLAYS = sorted([*CONF.glob("method/*.yaml"), *CONF.glob("ablation/*.yaml")])


def _flat(obj, prefix=""):
    """Flatten a dataclass tree into {dotted.key: value}, as config.yaml writes it (a key filled from the env
    spec at load is null there)."""
    out = {}
    for f in dataclasses.fields(obj):
        if f.name == "spec_defaults":
            continue
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out.update(_flat(value, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = value
    out.update(dict.fromkeys(getattr(obj, "spec_defaults", ())))
    return out


def test_env_files_hold_the_paper_settings():
    assert {p.stem for p in ENV_FILES} >= {"walker", "hopper", "halfcheetah", "swimmer"}
    for path in ENV_FILES:
        config = load_config([path])
        spec = resolve_env_spec(config)
        assert (config.loop.initial_episodes, config.loop.expert_episodes) == (1000, 1000)
        assert (config.loop.cycles, config.loop.steps_per_cycle) == (2, 100_000)
        assert (config.eval.every, config.eval.num_weights, config.eval.episodes) == (10_000, 100, 5)
        assert config.reward.name == "resymnet" and config.reward.ensemble_size == 3
        assert config.agent.symreg_lambda == spec.symreg_lambda
        assert config.run_dir == f"runs/{spec.id}/prism/seed0"  # interpolations resolved


EXPECTED_CHANGES = {
    "oracle": {"method": "oracle", "env.dense": True, "reward.name": "none", "agent.symreg_lambda": 0.0},
    "baseline": {"method": "baseline", "reward.name": "none", "agent.symreg_lambda": 0.0},
    "prism": {"agent.symreg_lambda": None},
    "wo_residual": {"method": "wo_residual", "reward.residual": False},
    "wo_dense": {"method": "wo_dense", "reward.use_dense_features": False},
    "wo_ensemble": {"method": "wo_ensemble", "reward.ensemble_size": 1},
    "wo_refinement": {"method": "wo_refinement", "loop.cycles": 1, "loop.steps_per_cycle": 200_000},
    "wo_loss": {"method": "wo_loss", "agent.symreg_lambda": 0.0},
    "uniform": {"method": "uniform", "reward.name": "uniform"},
    "random": {"method": "random", "reward.name": "random"},
    "rrd": {"method": "rrd", "reward.name": "rrd", "agent.symreg_lambda": None},
    "sparse_cost": {"method": "sparse_cost", "env.sparse_channel": -1},
    "relabel": {"method": "relabel", "reward.relabel": True},
}


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.stem)
def test_overlay_changes_only_what_it_should(overlay):
    base = _flat(load_config([CONF / "hopper.yaml"]))
    changed = _flat(load_config([CONF / "hopper.yaml", overlay]))
    # A method with another reward model types reward: with its own keys: ReSymNet's are not there (and RRD's
    # appear), so compare the keys both have.
    diff = {k: changed[k] for k in base if k in changed and base[k] != changed[k] and k != "run_dir"}
    expected = {k: v for k, v in EXPECTED_CHANGES[overlay.stem].items() if base[k] != v}
    assert diff == expected
    if diff.get("method"):
        assert changed["run_dir"] == f"runs/mo-hopper-v5/{diff['method']}/seed0"


def test_sparse_cost_is_the_last_channel_everywhere():
    for env_file, expected in [("hopper", 2), ("walker", 1), ("halfcheetah", 1), ("swimmer", 1)]:
        config = load_config([CONF / f"{env_file}.yaml", CONF / "ablation/sparse_cost.yaml"])
        assert sparse_channel(config, resolve_env_spec(config)) == expected


def test_overrides_and_yaml_round_trip(tmp_path):
    config = load_config([CONF / "swimmer.yaml"], ["seed=7", "loop.steps_per_cycle=500", "env.p_rel=0.2"])
    assert (config.seed, config.loop.steps_per_cycle, config.env.p_rel) == (7, 500, 0.2)
    saved = tmp_path / "config.yaml"
    saved.write_text(to_yaml(config))
    assert load_config([saved]) == config
    assert isinstance(config, RunConfig)


BAD = [
    (["env.id=mo-ant-v9"], "env.id"),
    (["reward.name=magic"], "reward.name"),
    (["agent.name=ppo"], "agent.name"),
    (["env.sparse_channel=3"], "env.sparse_channel"),
    (["env.p_rel=1.5"], "env.p_rel"),
    (["env.p_rel=-0.1"], "env.p_rel"),
    (["loop.steps_per_cycle=0"], "loop.steps_per_cycle"),
    (["loop.cycles=-1"], "loop.cycles"),
    (["loop.initial_episodes=0"], "loop.initial_episodes"),
    (["reward.ensemble_size=0"], "reward.ensemble_size"),
    (["eval.every=0"], "eval.every"),
    (["agent.symreg_lambda=-1"], "agent.symreg_lambda"),
    (["loop.cycles=two"], "loop.cycles"),
    (["env.colour=red"], "env.colour"),
    (["seed"], "seed"),
    (["env.dense=true"], "reward.name"),
    (["env.dense=true", "reward.name=uniform"], "reward.name"),  # no hidden channel for any redistribution
    (["env.dense=true", "reward.name=rrd"], "reward.name"),
    (["env.spec={symmetric_obs: [0, 1]}"], "env."),
]


@pytest.mark.parametrize(("overrides", "key"), BAD, ids=[b[0][0] for b in BAD])
def test_bad_values_name_the_key(overrides, key):
    with pytest.raises(ConfigError) as info:
        load_config([CONF / "hopper.yaml"], overrides)
    message = str(info.value)
    assert message.startswith(key) and "\n" not in message


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="--config: file .* does not exist"):
        load_config([tmp_path / "nope.yaml"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("env: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config([bad])
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config([listing])

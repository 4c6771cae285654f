"""The ``protocol`` key (prism/config/protocols.py): ``equal`` (the default) vs the authors' ``released`` protocol.

Pinned here: under ``released`` the oracle and baseline train exactly M env steps and the PRISM-side arms
IR × M; the PRISM-side actor has one more 256-wide hidden layer; λ is 1 on the PRISM side (0 for "w/o loss"
and for oracle/baseline); applying the protocol twice (a resumed run reloading its config.yaml) changes
nothing; ``equal`` leaves every other key exactly as it was without the protocol key.
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest
from toy_runs import toy_run

from prism.config import ConfigError, load_config, resolve_env_spec, to_yaml
from prism.config.protocols import apply_protocol
from prism.run.fit import build_run, fit_run

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
HOPPER = str(CONF / "hopper.yaml")


def overlay(name: str) -> str:
    return str(CONF / name)


ARMS = {
    "oracle": overlay("method/oracle.yaml"),
    "baseline": overlay("method/baseline.yaml"),
    "prism": overlay("method/prism.yaml"),
    "uniform": overlay("ablation/uniform.yaml"),
    "random": overlay("ablation/random.yaml"),
    "wo_loss": overlay("ablation/wo_loss.yaml"),
    "wo_residual": overlay("ablation/wo_residual.yaml"),
}


@pytest.mark.parametrize("arm", ["oracle", "baseline"])
def test_released_oracle_and_baseline_train_one_cycle_with_the_paper_actor_and_no_symreg(arm):
    equal = load_config([HOPPER, ARMS[arm]], ["loop.steps_per_cycle=25000"])
    released = load_config([HOPPER, ARMS[arm]], ["loop.steps_per_cycle=25000", "protocol=released"])
    assert equal.loop.cycles == 2 and released.loop.cycles == 1  # M, not IR × M
    assert released.loop.steps_per_cycle == 25000
    assert released.agent.actor_hidden == [256, 256]
    assert released.agent.symreg_lambda == 0.0


@pytest.mark.parametrize("arm", ["prism", "uniform", "random", "wo_residual"])
def test_released_prism_side_arms_train_ir_cycles_with_lambda_one_and_the_released_actor(arm):
    config = load_config([HOPPER, ARMS[arm]], ["protocol=released"])
    assert config.loop.cycles == 2
    assert config.agent.actor_hidden == [256, 256, 256]
    assert config.agent.symreg_lambda == 1.0  # the released config's λ, not hopper's 0.01
    equal = load_config([HOPPER, ARMS[arm]], [])
    assert equal.agent.actor_hidden == [256, 256]
    assert equal.agent.symreg_lambda in (None, 0.01)  # the paper's hopper λ (None: taken from the env spec)


def test_released_wo_loss_keeps_its_ablated_lambda_of_zero():
    config = load_config([HOPPER, ARMS["wo_loss"]], ["protocol=released"])
    assert config.agent.symreg_lambda == 0.0 and config.agent.actor_hidden == [256, 256, 256]


@pytest.mark.parametrize("arm", sorted(ARMS))
def test_the_released_protocol_is_idempotent_and_survives_a_config_yaml_round_trip(arm, tmp_path):
    config = load_config([HOPPER, ARMS[arm]], ["protocol=released"])
    assert apply_protocol(config, resolve_env_spec(config)) == config
    saved = tmp_path / "config.yaml"
    saved.write_text(to_yaml(config))
    assert load_config([saved]) == config  # what --resume reloads


def test_equal_protocol_changes_no_key_of_any_shipped_arm():
    for path in ARMS.values():
        plain = load_config([HOPPER, path])
        explicit = load_config([HOPPER, path], ["protocol=equal"])
        assert plain.protocol == "equal" and explicit == plain


def test_bad_protocol_values_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"^protocol: must be one of equal, released, got 'paper'$"):
        load_config([HOPPER], ["protocol=paper"])
    with pytest.raises(ConfigError, match=r"^agent\.actor_hidden: protocol=released fixes"):
        load_config([HOPPER, ARMS["prism"]], ["protocol=released", "agent.actor_hidden=[64,64]"])
    with pytest.raises(ConfigError, match=r"^protocol: released is defined for the capql backbone"):
        load_config([HOPPER, ARMS["prism"]], ["protocol=released", "agent.name=gpi_pd"])


def _linear_shapes(actor) -> list[tuple[int, int]]:
    """(in, out) of each layer of member 0's policy MLP."""
    return [tuple(w.shape[1:]) for w in actor.net.weights]


def test_released_actor_layer_shapes_on_hopper(tmp_path):
    obs, objectives, act = 11, 3, 3
    shapes = {}
    for arm in ("oracle", "prism"):
        config = load_config([HOPPER, ARMS[arm]], ["protocol=released", f"run_dir={tmp_path / arm}"])
        run = build_run(config, progress_bar=False)
        shapes[arm] = _linear_shapes(run.agent.actor)
        assert run.agent.symreg_lambda == (1.0 if arm == "prism" else 0.0)
    # obs + w -> 256 -> 256 -> heads (mean and log-std of every action dimension, one fused head)
    assert shapes["oracle"] == [(obs + objectives, 256), (256, 256), (256, 2 * act)]
    # the released PRISM agent: one more Linear(256, 256) + ReLU before the heads
    assert shapes["prism"] == [(obs + objectives, 256), (256, 256), (256, 256), (256, 2 * act)]


def _final_env_steps(run_dir: Path) -> int:
    """The env steps of eval.csv's last row (the final evaluation)."""
    with (run_dir / "eval.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows[-1]["final"] == "1"
    return int(rows[-1]["env_steps"])


@pytest.mark.parametrize(
    ("arm", "expected_steps"),
    [("oracle", 200), ("baseline", 200), ("prism", 400), ("uniform", 400)],
)
def test_released_runs_stop_at_m_for_oracle_and_baseline_and_at_ir_m_for_prism_side(
    arm, expected_steps, tmp_path
):
    """Toy env, M = 200, IR = 2: the trained agent's env-step counter and eval.csv's final row agree."""
    # (ReSymNet's own keys only where the arm fits ReSymNet: another reward.name refuses them)
    resymnet = arm == "prism"
    overrides = toy_run({"agent.actor_hidden": None, "agent.critic_hidden": None}, resymnet=resymnet)
    run = fit_run(
        [overlay("quickstart.yaml"), ARMS[arm]],
        [*overrides, "protocol=released", f"run_dir={tmp_path / arm}", "figures=false"],
    )
    assert int(run.agent.env_step_count) == expected_steps
    assert _final_env_steps(tmp_path / arm) == expected_steps


def test_equal_protocol_gives_every_arm_ir_m_steps(tmp_path):
    overrides = toy_run({"agent.actor_hidden": None, "agent.critic_hidden": None}, resymnet=False)
    run = fit_run(
        [overlay("quickstart.yaml"), ARMS["oracle"]],
        [*overrides, f"run_dir={tmp_path / 'o'}", "figures=false"],
    )
    assert int(run.agent.env_step_count) == 400


def test_protocol_is_recorded_in_config_yaml(tmp_path):
    config = load_config([HOPPER, ARMS["prism"]], ["protocol=released"])
    text = to_yaml(config)
    assert "protocol: released" in text
    assert "protocol: equal" in to_yaml(dataclasses.replace(config, protocol="equal"))

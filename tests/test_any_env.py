"""Any multi-objective gymnasium env runs (issue 11): derived specs, user symmetry tables, one-line errors.

Two envs prism does not ship: ``mo-hopper-2obj-v5`` (MuJoCo) and ``mo-mountaincarcontinuous-v0`` (classic
control, pure Python); ``mo-humanoid-v5`` for actions outside [−1, 1]; small envs defined here for the
failure modes no installed env has.
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import gymnasium as gym
import mo_gymnasium as mo_gym
import numpy as np
import pytest
import yaml
from gymnasium import spaces

from prism.agents import CAPQLConfig
from prism.agents.capql import CAPQLModule
from prism.cli import main
from prism.config import ConfigError, load_config, resolve_env_spec, to_yaml
from prism.envs import SpecError, derive_env_spec, get_env_spec, make_env
from prism.envs.state import get_env_state, set_env_state

CONF = Path(__file__).resolve().parents[1] / "conf"
HOPPER_2OBJ = "mo-hopper-2obj-v5"
CAR = "mo-mountaincarcontinuous-v0"
# mo-hopper-2obj-v5 is the paper's hopper body without the energy objective: the same reflection table.
HOPPER_TABLE = "env.spec={symmetric_obs: [2, 3, 4, 8, 9, 10], symmetric_act: [0, 1, 2], symreg_lambda: 0.01}"
TINY = [
    "loop.initial_episodes=3",
    "loop.expert_episodes=2",
    "loop.cycles=1",
    "loop.steps_per_cycle=120",
    "loop.checkpoint_every=60",
    "reward.hidden=16",
    "reward.ensemble_size=2",
    "reward.max_epochs=4",
    "reward.patience=4",
    "agent.learning_starts=40",
    "agent.batch_size=16",
    "agent.buffer_size=500",
    "agent.actor_hidden=[16]",
    "agent.critic_hidden=[16]",
    "agent.log_every=40",
    "eval.every=120",
    "eval.num_weights=2",
    "eval.episodes=1",
    "eval.final.num_weights=2",
    "eval.final.episodes=1",
]
# Mountain car's random-policy episodes last the whole 999-step limit; a shorter one keeps the test fast.
SHORT_CAR = "env.spec.max_episode_steps=50"


# ---- envs with the failure modes (and the state hook) no installed env has ---------------------------
class _PointEnv(gym.Env):
    """1-D point with a 2-objective reward; ``bounds`` sets the action box, ``hooks`` the state methods."""

    def __init__(self, bounds: float = 1.0):
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Box(-bounds, bounds, shape=(1,), dtype=np.float32)
        self.reward_space = spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.objective_names = ["distance", "effort"]
        self._x = 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._x = float(self.np_random.uniform(-1, 1))
        return np.array([self._x, 0.0], dtype=np.float32), {}

    def step(self, action):
        self._x += 0.1 * float(action[0]) + 0.01 * float(self.np_random.normal())
        reward = np.array([-abs(self._x), -(float(action[0]) ** 2)], dtype=np.float32)
        return np.array([self._x, 0.0], dtype=np.float32), reward, False, False, {}


class _HookedPointEnv(_PointEnv):
    def prism_get_state(self):
        return {"x": self._x}

    def prism_set_state(self, state):
        self._x = state["x"]


for _id, _entry, _kwargs in (
    ("prism-test/Point-v0", _PointEnv, {}),
    ("prism-test/HookedPoint-v0", _HookedPointEnv, {}),
    ("prism-test/Unbounded-v0", _HookedPointEnv, {"bounds": np.inf}),
):
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_entry, kwargs=_kwargs, max_episode_steps=20)


# ---- derived specs ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("env_id", "steps"), [(HOPPER_2OBJ, 1000), (CAR, 999)])
def test_spec_is_derived_from_the_env(env_id, steps):
    with pytest.raises(SpecError, match="env.id: unknown env"):
        get_env_spec(env_id)  # not shipped: the registry does not know it
    spec = derive_env_spec(env_id)
    env = mo_gym.make(env_id)  # built independently of prism
    assert (spec.obs_dim, spec.act_dim) == (env.observation_space.shape[0], env.action_space.shape[0])
    assert spec.n_objectives == env.unwrapped.reward_space.shape[0] == 2
    assert spec.objective_names == ("objective_0", "objective_1")
    assert spec.max_episode_steps == steps == env.spec.max_episode_steps
    assert (spec.sparse_channel, spec.symreg_lambda, spec.ref_point) == (0, 0.0, (-100.0, -100.0))
    assert not spec.has_symmetry and spec.symmetric_obs is None and spec.symmetric_act is None
    # No symmetry is not an identity reflection: there is no L_g to ask for.
    with pytest.raises(SpecError, match=f"env.symmetric_obs: {env_id} has no reflection symmetry table"):
        spec.obs_reflection()
    config = load_config([CONF / "quickstart.yaml"], [f"env.id={env_id}", "agent.symreg_lambda=0"])
    assert resolve_env_spec(config) == spec


def test_objective_names_come_from_the_env_when_it_has_them():
    assert derive_env_spec("prism-test/HookedPoint-v0").objective_names == ("distance", "effort")


def test_env_of_a_users_own_package_by_module_id(tmp_path, monkeypatch):
    # `module:Env-v0` imports `module` (which registers the env) before the lookup, as gymnasium.make does.
    (tmp_path / "prism_test_user_pkg.py").write_text(
        "import gymnasium as gym\n"
        "gym.register('UserPoint-v0', entry_point='test_any_env:_HookedPointEnv', kwargs={'bounds': 3.0},\n"
        "             max_episode_steps=7)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    spec = derive_env_spec("prism_test_user_pkg:UserPoint-v0")
    assert (spec.obs_dim, spec.act_dim, spec.max_episode_steps) == (2, 1, 7)
    assert spec.make().action_space.high[0] == 1.0  # [-3, 3] rescaled


def test_user_table_layers_on_the_derived_spec():
    config = load_config([CONF / "quickstart.yaml"], [f"env.id={HOPPER_2OBJ}", HOPPER_TABLE])
    spec = resolve_env_spec(config)
    assert spec.has_symmetry and spec.symreg_lambda == 0.01
    assert spec.asymmetric_obs == (0, 1, 5, 6, 7)  # the complement of symmetric_obs when not given
    # It is the paper's hopper table, and everything not given still comes from the env.
    paper = get_env_spec("mo-hopper-v5")
    np.testing.assert_array_equal(spec.obs_reflection(), paper.obs_reflection())
    np.testing.assert_array_equal(spec.act_reflection(), paper.act_reflection())
    assert (spec.obs_dim, spec.n_objectives, spec.max_episode_steps) == (11, 2, 1000)
    # A user table describing the identity would make SymReg silently zero.
    with pytest.raises(SpecError, match="env.symmetric_obs: .*both empty"):
        spec.replace(symmetric_obs=(), asymmetric_obs=None, symmetric_act=())
    with pytest.raises(SpecError, match="env.symmetric_act: missing"):
        derive_env_spec(HOPPER_2OBJ).replace(symmetric_obs=(2, 3))


def test_actions_outside_unit_box_are_rescaled():
    spec = derive_env_spec("mo-humanoid-v5")
    raw = mo_gym.make("mo-humanoid-v5")
    assert raw.action_space.high.max() == pytest.approx(0.4)  # not [-1, 1]
    env = make_env(spec, sparse_channel=0, seed=0)
    np.testing.assert_array_equal(env.action_space.low, -1.0)
    np.testing.assert_array_equal(env.action_space.high, 1.0)
    action = np.random.default_rng(0).uniform(-1, 1, spec.act_dim).astype(np.float32)
    env.reset(seed=3)
    raw.reset(seed=3)
    obs, *_ = env.step(action)
    raw_obs, *_ = raw.step(0.4 * action)  # the affine map [-1, 1] -> [-0.4, 0.4]
    np.testing.assert_allclose(obs, raw_obs, rtol=1e-5, atol=1e-6)
    wide = derive_env_spec("prism-test/HookedPoint-v0").make(bounds=2.0)
    assert isinstance(wide, gym.wrappers.RescaleAction) and wide.action_space.high[0] == 1.0


@pytest.mark.parametrize(
    ("env_id", "message"),
    [
        ("mo-nowhere-v0", "env.id: unknown env 'mo-nowhere-v0'"),
        ("mo-mountaincar-v0", "env.id: mo-mountaincar-v0 has a Discrete action space"),
        ("Pendulum-v1", "env.id: Pendulum-v1 has no vector reward_space"),
        ("prism-test/Unbounded-v0", "env.id: prism-test/Unbounded-v0 has unbounded actions"),
        ("prism-test/Point-v0", "env.id: prism cannot save the state of prism-test/Point-v0"),
    ],
)
def test_unusable_envs_are_one_line_errors(env_id, message):
    with pytest.raises(ConfigError) as info:
        load_config([CONF / "quickstart.yaml"], [f"env.id={env_id}"])
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


# ---- env state for checkpoints ---------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", [CAR, "prism-test/HookedPoint-v0"])
def test_state_round_trip_continues_bit_for_bit(env_id):
    env = make_env(derive_env_spec(env_id), sparse_channel=0, p_rel=0.1, seed=1)
    env.reset(seed=5)
    actions = np.random.default_rng(1).uniform(-1, 1, (30, 1)).astype(np.float32)
    for a in actions[:10]:
        env.step(a)
    state = get_env_state(env)
    first = [env.step(a)[:2] for a in actions[10:]]
    set_env_state(env, state)
    again = [env.step(a)[:2] for a in actions[10:]]
    for (obs, rew), (obs2, rew2) in zip(first, again):
        np.testing.assert_array_equal(obs, obs2)
        np.testing.assert_array_equal(rew, rew2)


# ---- SymReg without a table -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["agent.symreg_lambda=0.1"],
            f"agent.symreg_lambda: {HOPPER_2OBJ} has no reflection symmetry table; give "
            "env.spec.symmetric_obs / asymmetric_obs / symmetric_act (see docs/custom_env.md) "
            "or set agent.symreg_lambda=0",
        ),
        (["agent.symmetry_mode=exact"], "agent.symmetry_mode: exact needs a reflection symmetry table"),
        (["env.spec.symreg_lambda=0.1"], "env.symreg_lambda: 0.1 needs a reflection symmetry table"),
    ],
)
def test_symreg_without_a_table_exits_2_with_one_line(overrides, message, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(["fit", "--config", str(CONF / "quickstart.yaml"), f"env.id={HOPPER_2OBJ}", *overrides,
                 f"run_dir={run_dir}"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == f"prism: error: {err.removeprefix('prism: error: ')}"
    assert err.removeprefix("prism: error: ").startswith(message) and "\n" not in err
    assert not run_dir.exists()


def test_unknown_id_stays_a_one_line_cli_error(capsys):
    code = main(["fit", "--config", str(CONF / "quickstart.yaml"), "env.id=mo-ant-v9"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("prism: error: env.id: unknown env 'mo-ant-v9'") and "\n" not in err


@pytest.mark.parametrize(
    ("env_id", "hint"),
    [
        ("mo-hoper-v5", "; did you mean 'mo-hopper-v5'?"),  # a prism spec
        ("mo-walker-v5", "; did you mean 'mo-walker2d-v5'?"),
        ("mo-mountaincarcontinous-v0", "; did you mean 'mo-mountaincarcontinuous-v0'?"),  # mo-gymnasium's
        ("no-such-env-at-all", ""),  # nothing close: no guess
    ],
)
def test_an_unknown_id_suggests_the_nearest_known_one(env_id, hint, tmp_path, capsys):
    code = main(
        ["fit", "--config", str(CONF / "quickstart.yaml"), f"env.id={env_id}", f"run_dir={tmp_path / 'r'}"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and err.startswith(f"prism: error: env.id: unknown env {env_id!r}")
    assert err.endswith("nor a gymnasium / mo-gymnasium id" + hint)
    assert not (tmp_path / "r").exists()


def test_agent_refuses_symreg_without_a_table():
    spec = derive_env_spec(CAR)
    with pytest.raises(ValueError, match="agent.symreg_lambda"):
        CAPQLModule(CAPQLConfig(symreg_lambda=0.1), spec, lambda _member: make_env(spec))
    with pytest.raises(ValueError, match="agent.symmetry_mode"):
        CAPQLModule(CAPQLConfig(symmetry_mode="exact"), spec, lambda _member: make_env(spec))
    assert CAPQLModule(CAPQLConfig(), spec, lambda _member: make_env(spec)).obs_sign is None


# ---- whole runs -----------------------------------------------------------------------------------------
def _fit(tmp_path: Path, name: str, *args: str, resymnet: bool = True) -> tuple[Path, list[dict[str, str]]]:
    run_dir = tmp_path / name
    # (a run without ReSymNet refuses its keys: TINY's reward.hidden and reward.ensemble_size are left out)
    tiny = (
        TINY
        if resymnet
        else [o for o in TINY if not o.startswith(("reward.hidden=", "reward.ensemble_size="))]
    )
    code = main(["fit", "--config", str(CONF / "quickstart.yaml"), *args, *tiny, f"run_dir={run_dir}"])
    assert code == 0
    with open(run_dir / "eval.csv") as f:
        rows = list(csv.DictReader(f))
    return run_dir, rows


def _symreg_lambda(run_dir: Path) -> float:
    return yaml.safe_load((run_dir / "tb" / "hparams.yaml").read_text())["symreg_lambda"]


@pytest.mark.parametrize(("env_id", "extra"), [(HOPPER_2OBJ, []), (CAR, [SHORT_CAR])])
def test_baseline_and_prism_run_on_unshipped_envs(env_id, extra, tmp_path, caplog, monkeypatch):
    monkeypatch.setattr("prism.config.agent_keys._WARNED", set())  # the warning is logged once per process
    for method in ("baseline", "prism"):
        with caplog.at_level(logging.WARNING, logger="prism.config"):
            run_dir, rows = _fit(tmp_path, method, str(CONF / "method" / f"{method}.yaml"), f"env.id={env_id}",
                                 *extra, resymnet=method == "prism")  # fmt: skip
        # the periodic evaluation at step 120, then the final one (same protocol here: its result is reused)
        assert [(int(r["env_steps"]), r["final"]) for r in rows] == [(120, "0"), (120, "1")]
        assert "return_objective_0" in rows[0] and "return_objective_1" in rows[0]
        assert rows[0]["equivariance_error"] == ""  # no table, nothing to measure against
        assert _symreg_lambda(run_dir) == 0.0
        warned = [r.message for r in caplog.records if "SymReg is off" in r.message]
        # PRISM (λ = null -> the spec's 0) says it runs without SymReg; the baseline asked for λ = 0.
        assert len(warned) == (method == "prism")
        caplog.clear()
        if env_id == CAR:
            assert float(rows[0]["mean_episode_length"]) <= 50  # the user's partial env.spec took effect


def test_prism_with_a_user_symmetry_table_runs_symreg(tmp_path):
    run_dir, rows = _fit(tmp_path, "symreg", str(CONF / "method" / "prism.yaml"), f"env.id={HOPPER_2OBJ}",
                         HOPPER_TABLE)  # fmt: skip
    assert [(int(r["env_steps"]), r["final"]) for r in rows] == [(120, "0"), (120, "1")]
    assert float(rows[0]["equivariance_error"]) > 0.0  # measured with the user's L_g, K_g
    assert _symreg_lambda(run_dir) == 0.01
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    assert max(e.value for e in events.Scalars("train/symreg")) > 0.0  # the SymReg term was computed


# ---- the method of a run whose null λ resolves to 0 (issue 50, item 8) ------------------------------------
def test_on_an_env_without_a_table_the_derived_method_says_symreg_is_off(monkeypatch, caplog):
    """``env.id=mo-hopper-2obj-v5`` on the quickstart (ReSymNet, λ null = the spec's 0) is ReSymNet without
    SymReg: derived ``wo_loss`` (its folder and summary.json follow), as ``agent.symreg_lambda=0`` would be."""
    monkeypatch.setattr("prism.config.agent_keys._WARNED", set())
    quick = [CONF / "quickstart.yaml"]
    with caplog.at_level(logging.WARNING, logger="prism.config"):
        config = load_config(quick, [f"env.id={HOPPER_2OBJ}"])
    assert (config.method, config.run_dir) == ("wo_loss", f"runs/{HOPPER_2OBJ}/wo_loss/seed0")
    # The typed config holds the λ it trains with; config.yaml still says "the spec's λ" (null).
    assert config.agent.symreg_lambda == 0.0 and config.spec_defaults == ("agent.symreg_lambda",)
    assert yaml.safe_load(to_yaml(config))["agent"]["symreg_lambda"] is None
    assert load_config(quick, [f"env.id={HOPPER_2OBJ}", "agent.symreg_lambda=0"]).method == "wo_loss"
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "so SymReg is off (λ = 0) and the run is filed as wo_loss;" in warning
    # reward-free: baseline, not baseline+symreg
    assert load_config(quick, [f"env.id={HOPPER_2OBJ}", "reward.name=none"]).method == "baseline"
    # with the user's table the spec's λ is > 0: prism, as on the shipped hopper
    assert load_config(quick, [f"env.id={HOPPER_2OBJ}", HOPPER_TABLE]).method == "prism"
    assert load_config(quick).method == "prism"
    # the PRISM overlay names the method: kept (as on a backbone without SymReg), with a warning saying so
    caplog.clear()
    monkeypatch.setattr("prism.config.agent_keys._WARNED", set())
    with caplog.at_level(logging.WARNING, logger="prism.config"):
        labelled = load_config([*quick, CONF / "method" / "prism.yaml"], [f"env.id={HOPPER_2OBJ}"])
    assert labelled.method == "prism"
    assert "the run, labelled prism, trains as wo_loss" in caplog.records[0].getMessage()


def test_gpi_pd_symreg_without_a_table_is_refused_at_load():
    """The symmetry-table rule is one rule for every backbone with SymReg: GPI-PD's λ > 0 on an env without a
    table is refused when the config loads (before anything is built or written), as CAPQL's is."""
    with pytest.raises(
        ConfigError, match=f"^agent.symreg_lambda: {HOPPER_2OBJ} has no reflection symmetry table"
    ):
        load_config([CONF / "quickstart.yaml", CONF / "agent" / "gpi_pd.yaml"],
                    [f"env.id={HOPPER_2OBJ}", "agent.symreg_lambda=0.1"])  # fmt: skip
    config = load_config(
        [CONF / "quickstart.yaml", CONF / "agent" / "gpi_pd.yaml"], [f"env.id={HOPPER_2OBJ}"]
    )
    assert config.agent.symreg_lambda == 0.0 and config.method == "wo_loss"

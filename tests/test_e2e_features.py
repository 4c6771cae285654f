"""End-to-end tests of shipped features through ``prism fit`` (issue 11: gaps in the tests).

Every test runs the real CLI / run builder in-process on the toy env with tiny budgets and asserts on what the
run wrote or built: resume of the segment-holding shapers, ``--overwrite``, ``front.csv`` / ``summary.json``,
class-path plug-ins, ``agent.symmetry_mode=exact``, ``env.p_rel > 0`` and a user ``env.spec``. Rows of
``eval.csv`` are selected by ``env_steps`` or position and columns by name, never by the full column list.
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from toy_runs import toy_run

from prism.cli import main
from prism.config import load_config, resolve_env_spec, to_yaml
from prism.core.seeding import derive_seed
from prism.envs import TOY_SPEC, EnvSpec, SparseRewardWrapper
from prism.run import checkpoint as checkpoint_module
from prism.run.fit import fit_run

CONF = Path(__file__).resolve().parents[1] / "conf"
QUICKSTART = str(CONF / "quickstart.yaml")
STEPS_PER_CYCLE = 300
CYCLES = 2
TOTAL = STEPS_PER_CYCLE * CYCLES
TINY = toy_run(
    {
        "loop.cycles": CYCLES,
        "loop.steps_per_cycle": STEPS_PER_CYCLE,
        "loop.checkpoint_every": 100,
        "eval.every": 125,
        "eval.episodes": 2,
        "eval.final.episodes": 2,
    }
)


TINY_ANY_REWARD = [a for a in TINY if not a.startswith("reward.hidden=")]
"""TINY without ReSymNet's own keys, for a run with another reward method (which refuses them)."""


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _tree_digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _fit(run_dir: Path, *extra: str, files: tuple[str, ...] = (QUICKSTART,)) -> list[str]:
    """argv of ``prism fit`` for the tiny toy run."""
    overrides = TINY if files == (QUICKSTART,) else TINY_ANY_REWARD
    return ["fit", "--config", *files, *overrides, f"run_dir={run_dir}", *extra]


def _equivariance_error(mean_fn, obs_sign: torch.Tensor, act_sign: torch.Tensor, n: int = 256) -> float:
    """mean ‖μ(L s, w) − K μ(s, w)‖₁ of a pre-tanh mean function ``mean_fn(obs, weight)`` on random states."""
    g = torch.Generator().manual_seed(0)
    obs = torch.rand(n, TOY_SPEC.obs_dim, generator=g) * 2 - 1
    w = torch.rand(n, 1, generator=g)
    weight = torch.cat([w, 1 - w], dim=1)
    with torch.no_grad():
        return (mean_fn(obs * obs_sign, weight) - act_sign * mean_fn(obs, weight)).abs().sum(1).mean().item()


# ---- uniform / random: pending segments survive a crash and resume ----------------------------------------
class _Crash(Exception):
    """Stands in for a kill: raised from inside training, after the run's checkpointer has had its turn."""


CHECKPOINT_AT, CRASH_AT = 200, 270  # the crash comes after the checkpoint at 200 and the evaluation at 250


@pytest.mark.slow  # two runs and a resume per shaper
@pytest.mark.parametrize("name", ["uniform", "random"])
def test_uniform_and_random_resume_mid_segment_gives_the_same_eval_csv(name, tmp_path, monkeypatch):
    files = (QUICKSTART, str(CONF / "ablation" / f"{name}.yaml"))
    reference = tmp_path / "reference"
    assert main(_fit(reference, files=files)) == 0
    reference_csv = (reference / "eval.csv").read_text()
    assert [int(r["env_steps"]) for r in _rows(reference / "eval.csv")][:3] == [125, 250, 375]

    original = checkpoint_module.RunCheckpointer.on_train_batch_end

    def crash_after(self, trainer, pl_module, *args):
        original(self, trainer, pl_module, *args)
        # a batch may run several env steps: crash at the first batch end past CRASH_AT (before the next
        # checkpoint and evaluation)
        if pl_module.env_step_count >= CRASH_AT:
            raise _Crash

    crashed = tmp_path / "crashed"
    monkeypatch.setattr(checkpoint_module.RunCheckpointer, "on_train_batch_end", crash_after)
    with pytest.raises(_Crash):
        fit_run(list(files), [*TINY_ANY_REWARD, f"run_dir={crashed}"])
    monkeypatch.undo()
    # The row evaluated at 250 is newer than the checkpoint: resume must drop it and recompute it.
    assert [int(r["env_steps"]) for r in _rows(crashed / "eval.csv")] == [125, 250]

    state = torch.load(crashed / "checkpoints" / "last.pt", weights_only=True)
    assert state["env_steps"] == CHECKPOINT_AT
    # one member (a single run): its shaper, episode length, replay ring and observation
    shaper, runtime = state["shapers"][0], state["agent_runtime"]
    pending = shaper["pending"]
    assert pending is not None, "the checkpoint was taken at a segment boundary: pick another CHECKPOINT_AT"
    n_pending = pending["obs"].shape[0]
    # p_rel = 0: the open segment is the current episode so far, and none of it has reached the buffer yet.
    assert n_pending == int(runtime["episode_length"][0]) > 0
    assert int(runtime["replay"]["sizes"][0]) == CHECKPOINT_AT - n_pending
    torch.testing.assert_close(pending["next_obs"][-1], runtime["obs"][0])
    assert (pending["reward"][:, TOY_SPEC.sparse_channel] == 0).all()  # nothing released inside the segment
    if name == "random":
        assert "rng" in shaper  # its α draws continue from the same generator state

    assert main(["fit", "--resume", str(crashed)]) == 0
    assert (crashed / "eval.csv").read_text() == reference_csv


# ---- --overwrite, front.csv and summary.json ----------------------------------------------------------
def _hypervolume_2d(points: np.ndarray, ref: tuple[float, float]) -> float:
    """Area dominated by maximised 2-D points above ``ref``, by sweeping the points in decreasing x."""
    area, best_y = 0.0, ref[1]
    for x, y in sorted(map(tuple, points), key=lambda p: (-p[0], -p[1])):
        if y > best_y and x > ref[0]:
            area += (x - ref[0]) * (y - best_y)
            best_y = y
    return area


def _check_front_and_summary(run_dir: Path, spec: EnvSpec, method: str, num_weights: int) -> None:
    last = _rows(run_dir / "eval.csv")[-1]  # the evaluation that produced front.csv and summary.json
    front = _rows(run_dir / "front.csv")
    n = spec.n_objectives
    assert len(front) == num_weights
    names = spec.objective_names
    assert list(front[0]) == [
        *(f"{kind}_{name}" for kind in ("weight", "discounted_return_mean", "discounted_return_std",
                                         "undiscounted_return_mean") for name in names),
        "on_front",
    ]  # fmt: skip
    assert b"\r" not in (run_dir / "front.csv").read_bytes() + (run_dir / "eval.csv").read_bytes()
    weights = np.array([[float(r[f"weight_{name}"]) for name in names] for r in front])
    means = np.array([[float(r[f"discounted_return_mean_{name}"]) for name in names] for r in front])
    stds = np.array([[float(r[f"discounted_return_std_{name}"]) for name in names] for r in front])
    on_front = np.array([int(r["on_front"]) for r in front], dtype=bool)
    np.testing.assert_allclose(weights.sum(1), 1.0, rtol=1e-9)
    assert len({tuple(w) for w in weights}) == num_weights and (stds >= 0).all()
    # per-objective means over all weights are eval.csv's return_<name> columns
    for i, name in enumerate(spec.objective_names):
        assert means[:, i].mean() == pytest.approx(float(last[f"return_{name}"]), rel=1e-9, abs=1e-12)
    # on_front marks exactly the non-dominated rows (brute force), and there are `cardinality` distinct ones
    for j in range(num_weights):
        dominated = any(
            (means[k] >= means[j]).all() and (means[k] > means[j]).any() for k in range(num_weights)
        )
        assert on_front[j] == (not dominated)
    assert len({tuple(m) for m in means[on_front]}) == int(last["cardinality"])
    if n == 2:
        hv = _hypervolume_2d(means[on_front], spec.ref_point)
        assert hv == pytest.approx(float(last["hv"]), rel=1e-9)

    summary = json.loads((run_dir / "summary.json").read_text())
    assert {"method", "env", "seed", "env_steps", "final"} <= set(summary)
    assert (summary["method"], summary["env"], summary["seed"]) == (method, spec.id, 0)
    assert summary["env_steps"] == int(last["env_steps"]) == TOTAL
    shared = {k for k in summary["final"] if k in last and _is_number(last[k])}
    assert {"hv", "eum", "vo", "cardinality", "env_steps"} <= shared
    for key in shared:
        assert float(summary["final"][key]) == pytest.approx(float(last[key]), rel=1e-12), key


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def test_overwrite_replaces_a_non_empty_run_folder_and_refusal_leaves_it_untouched(tmp_path, capsys):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "eval.csv").write_text("env_steps,hv\n10,1.0\n")
    (run_dir / "checkpoints" / "last.pt").write_bytes(b"an older run")
    before = _tree_digest(run_dir)
    argv = _fit(run_dir, files=(QUICKSTART, str(CONF / "method" / "baseline.yaml")))

    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("prism: error: run_dir")
    assert _tree_digest(run_dir) == before

    assert main([*argv, "--overwrite"]) == 0
    after = _tree_digest(run_dir)
    assert after["checkpoints/last.pt"] != before["checkpoints/last.pt"]
    assert {"config.yaml", "eval.csv", "front.csv", "summary.json"} <= set(after)
    assert not any(name.startswith(".prism-overwritten") for name in after)  # the set-aside run is gone
    steps = [int(r["env_steps"]) for r in _rows(run_dir / "eval.csv")]
    assert steps[0] == 125 and steps[-1] == TOTAL and 10 not in steps  # the old row is gone
    assert torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["env_steps"] == TOTAL
    _check_front_and_summary(run_dir, TOY_SPEC, "baseline", num_weights=3)


def test_resuming_a_run_whose_overwrite_start_was_killed_finishes_the_overwrite(tmp_path, capsys):
    # An --overwrite start killed (SIGKILL) before its first checkpoint leaves the new run's config.yaml beside
    # the old contents it had set aside; `--resume` runs that new run, says where the old contents are, and
    # drops them at its first checkpoint, as the killed start would have
    run_dir = tmp_path / "run"
    config = load_config([QUICKSTART], [*TINY, f"run_dir={run_dir}"])
    aside = run_dir / ".prism-overwritten"
    aside.mkdir(parents=True)
    (aside / "eval.csv").write_text("env_steps,hv\n10,1.0\n")
    (run_dir / "config.yaml").write_text(to_yaml(config))
    assert main(["fit", "--resume", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert f"prism: {aside} holds what {run_dir} held before an --overwrite whose start was stopped" in err
    assert not aside.exists() and (run_dir / "summary.json").is_file()
    assert [int(r["env_steps"]) for r in _rows(run_dir / "eval.csv")][-1] == TOTAL
    # a resume with nothing set aside says nothing of it
    assert main(["fit", "--resume", str(run_dir), "loop.cycles=3"]) == 0
    assert ".prism-overwritten" not in capsys.readouterr().err


def test_resume_refuses_a_folder_whose_overwrite_was_killed_mid_move_and_moves_nothing(tmp_path, capsys):
    # Killed while it moved the old run aside, an --overwrite leaves the old run split: config.yaml in
    # .prism-overwritten.new, eval.csv beside it. A resume of either half would be a wrong run: one line, no write
    run_dir = tmp_path / "run"
    config = load_config([QUICKSTART], [*TINY, f"run_dir={run_dir}"])
    holder = run_dir / ".prism-overwritten.new"
    holder.mkdir(parents=True)
    (holder / "config.yaml").write_text(to_yaml(config))
    (run_dir / "eval.csv").write_text("env_steps,hv\n10,1.0\n")
    before = _tree_digest(run_dir)
    assert main(["fit", "--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prism: error: --resume: ")
    assert f"{str(holder)!r} holds part of what {str(run_dir)!r} held" in err[0]
    assert _tree_digest(run_dir) == before
    # the --overwrite it names finishes the move and the run, the split old run gone with it
    assert main(_fit(run_dir, "--overwrite")) == 0
    assert not holder.exists() and (run_dir / "summary.json").is_file()


# ---- class-path plug-ins ------------------------------------------------------------------------------
PLUGIN_SOURCE = '''
import numpy as np

from prism.agents.capql import CAPQLModule
from prism.reward.shapers import PredictedRewardShaper, Transition


class ConstantShaper:
    """Sets the sparse channel of every transition to 7 and counts what it is given."""

    def __init__(self, *, sparse_channel, model, seed):
        self.sparse_channel, self.model, self.seed = sparse_channel, model, seed
        self.pushes = 0
        self.resets = 0

    def push(self, obs, action, reward, next_obs, terminated, truncated, weight, released):
        self.pushes += 1
        shaped = np.array(reward, dtype=np.float32)
        shaped[self.sparse_channel] = 7.0
        return [Transition(obs, action, shaped, next_obs, bool(terminated), weight)]

    def reset(self):
        self.resets += 1


class ModelShaper(PredictedRewardShaper):
    """A shaper that asks for the learned reward model and records every model the loop installs."""

    needs_model = True

    def __init__(self, *, sparse_channel, model, seed):
        self.installed = []
        super().__init__(model, sparse_channel)

    @PredictedRewardShaper.model.setter
    def model(self, model):
        PredictedRewardShaper.model.fset(self, model)
        self.installed.append(model)


class CountingAgent(CAPQLModule):
    """CAPQL that counts its updates."""

    plugin_updates = 0

    def update(self, batch):
        self.plugin_updates += 1
        return super().update(batch)
'''


def test_class_path_plugins_for_reward_and_agent_are_used(tmp_path, monkeypatch):
    module_name = f"prism_test_plugin_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module_name}.py").write_text(textwrap.dedent(PLUGIN_SOURCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    run_dir = tmp_path / "run"
    run = fit_run(
        [QUICKSTART],
        [
            *TINY_ANY_REWARD,
            f"run_dir={run_dir}",
            f"reward.name={module_name}:ConstantShaper",
            f"agent.name={module_name}.CountingAgent",  # the dotted form works too
        ],
    )
    plugin = sys.modules[module_name]
    shaper, agent = run.agent.shaper, run.agent
    assert type(shaper) is plugin.ConstantShaper and type(agent) is plugin.CountingAgent
    # built with the registry's keywords: the run's sparse channel, no model, the shaper's own derived seed
    expected_seed = derive_seed(0, "shaper")
    assert (shaper.sparse_channel, shaper.model, shaper.seed) == (
        TOY_SPEC.sparse_channel,
        None,
        expected_seed,
    )
    # no learned model: no collection or fit phase, every env step went through the plug-in
    assert [p for p, _, _ in run.loop.state.history].count("fit") == 0 and run.loop.store is None
    assert shaper.pushes == TOTAL and shaper.resets == 1
    stored = agent.buffer.all().reward
    assert stored.shape[0] == TOTAL and (stored[:, TOY_SPEC.sparse_channel] == 7.0).all()
    assert agent.plugin_updates == agent.n_updates == TOTAL - 100 + 1  # one per step from learning_starts
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["reward"]["name"] == f"{module_name}:ConstantShaper"
    assert saved["agent"]["name"] == f"{module_name}.CountingAgent"


def test_class_path_reward_plugin_that_needs_a_model_gets_each_fitted_ensemble(tmp_path, monkeypatch):
    # Before the fix, ReSymNetConfig.validate rejected the class path at the first reward fit (a traceback).
    module_name = f"prism_test_plugin_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module_name}.py").write_text(textwrap.dedent(PLUGIN_SOURCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    run = fit_run(
        [QUICKSTART], [*TINY, f"run_dir={tmp_path / 'run'}", f"reward.name={module_name}:ModelShaper"]
    )
    shaper = run.agent.shaper
    assert type(shaper) is sys.modules[module_name].ModelShaper
    assert [p for p, _, _ in run.loop.state.history].count("fit") == CYCLES == run.loop.state.fits
    assert len(shaper.installed) == CYCLES + 1 and shaper.installed[0] is None  # None from the constructor
    assert shaper.installed[-1] is run.loop.model and shaper.installed[1] is not shaper.installed[2]
    # the sparse channel in the buffer is the model's prediction, not the emitted zeros between releases
    sparse = run.agent.buffer.all().reward[:, TOY_SPEC.sparse_channel]
    assert (sparse != 0).float().mean() > 0.9


# ---- agent.symmetry_mode=exact ------------------------------------------------------------------------
def test_symmetry_mode_exact_trains_an_exactly_equivariant_policy(tmp_path):
    from prism.agents.symmetry import OrbitAveragedActor, reflection_from_spec

    run_dir = tmp_path / "run"
    run = fit_run(
        [QUICKSTART, str(CONF / "method" / "baseline.yaml")],
        [*TINY_ANY_REWARD, f"run_dir={run_dir}", "agent.symmetry_mode=exact"],
    )
    assert isinstance(run.agent.actor, OrbitAveragedActor) and run.agent.n_updates > 0
    rows = _rows(run_dir / "eval.csv")
    assert len(rows) >= CYCLES and int(rows[-1]["env_steps"]) == TOTAL
    errors = [float(r["equivariance_error"]) for r in rows]
    assert max(errors) <= 1e-5, errors
    # ... while the trained network inside the orbit average is not equivariant on its own.
    obs_sign, act_sign = reflection_from_spec(TOY_SPEC)
    base = run.agent.actor.base
    assert _equivariance_error(lambda o, w: base(o, w)[0], obs_sign, act_sign) > 1e-3
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["agent"]["symmetry_mode"] == "exact"


# ---- env.p_rel > 0 through the loop ----------------------------------------------------------------------
def test_partial_release_in_the_loop_gives_segments_shorter_than_episodes(tmp_path):
    run = fit_run([QUICKSTART], [*TINY, f"run_dir={tmp_path / 'run'}", "env.p_rel=0.3"])
    store = run.loop.store
    # what a sweep's report reads per fit (segments per episode, the held-out per-step Pearson): the store as
    # segments, not episodes
    records = json.loads((tmp_path / "run" / "summary.json").read_text())["reward_fits"]
    assert records and all(r["store"]["segments"] >= 3 * r["store"]["episodes"] for r in records)
    assert all("pearson" in r["validation"] for r in records)
    assert store.num_episodes == sum(run.loop.state.episodes_collected) == 5 + 3
    # the toy env's first observation entry is t/T: it is 0 exactly on the first step of every episode
    assert int((store.features[:, 0] == 0).sum()) == store.num_episodes
    mean_episode_length = len(store) / store.num_episodes
    # p_rel = 0.3: about one release every 3.3 steps, so many segments per episode
    assert store.num_segments >= 3 * store.num_episodes
    assert store.segment_lengths.double().mean() < 0.5 * mean_episode_length
    # every segment's target is the sum of the true sparse rewards of its own steps
    sums = torch.zeros(store.num_segments).index_add_(0, store.segment_index, store.true_sparse)
    torch.testing.assert_close(store.targets, sums, atol=1e-4, rtol=1e-5)
    # the training env releases with the same probability
    env = run.agent.envs[0]
    assert isinstance(env, SparseRewardWrapper)
    assert env.release_prob[TOY_SPEC.sparse_channel] == 0.3


# ---- a user env.spec ---------------------------------------------------------------------------------
USER_SPEC = {
    # The toy env under another reflection: mirror x only (p_x, v_x and the first action), itself a true
    # symmetry of the toy's dynamics and rewards; the energy channel is the sparse one.
    "objective_names": ["outward", "energy"],
    "obs_dim": 6,
    "act_dim": 2,
    "sparse_channel": 1,
    "symmetric_obs": [2, 4],
    "asymmetric_obs": [0, 1, 3, 5],
    "symmetric_act": [0],
    "ref_point": [-50.0, -60.0],
    "symreg_lambda": 0.05,
    "max_episode_steps": 150,
}


def test_user_env_spec_from_a_yaml_file_runs_end_to_end_and_is_saved(tmp_path):
    user_file = tmp_path / "user_env.yaml"
    user_file.write_text(yaml.safe_dump({"env": {"id": "prism/Toy-v0", "spec": USER_SPEC}}))
    run_dir = tmp_path / "run"
    assert main([*_fit(run_dir, files=(QUICKSTART, str(user_file))), "agent.symmetry_mode=exact"]) == 0

    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["env"]["spec"] == USER_SPEC
    config = load_config([run_dir / "config.yaml"])  # what --resume and prism evaluate rebuild from
    spec = resolve_env_spec(config)
    assert spec == EnvSpec.from_dict({"id": "prism/Toy-v0", **USER_SPEC}) and spec != TOY_SPEC

    from prism.run.fit import build_run

    run = build_run(config, progress_bar=False)
    assert run.agent.symreg_lambda == 0.05 and run.agent.sparse_channel == 1
    assert run.agent.obs_sign.tolist() == [1, 1, -1, 1, -1, 1] and run.agent.act_sign.tolist() == [-1, 1]
    assert run.loop.settings.sparse_channel == 1

    # The run was trained and evaluated under the user's table: exactly equivariant for *its* reflection
    # (eval.csv measures against the run's spec), not for the built-in toy reflection.
    rows = _rows(run_dir / "eval.csv")
    assert int(rows[-1]["env_steps"]) == TOTAL
    assert max(float(r["equivariance_error"]) for r in rows) <= 1e-5
    from prism.run.checkpoint_files import load_agent_weights

    load_agent_weights(run)
    builtin = torch.tensor(TOY_SPEC.obs_reflection()), torch.tensor(TOY_SPEC.act_reflection())
    user = torch.tensor([1.0, 1, -1, 1, -1, 1]), torch.tensor([-1.0, 1])
    assert _equivariance_error(run.agent.policy_mean, *user) <= 1e-5
    assert _equivariance_error(run.agent.policy_mean, *builtin) > 1e-3
    # ... with the user's HV reference point
    _check_front_and_summary(run_dir, spec, "prism", num_weights=3)

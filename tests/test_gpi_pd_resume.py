"""A resumed GPI-PD run is bit-exact (issue 12): PER priorities, GPI-LS state, the GPI-LS eval env and the Dyna
state all travel in the checkpoint's runtime state.

In process: an agent trained to step T1 is checkpointed (weights, optimisers, runtime state, global RNGs; written
and read back as prism's checkpoints are), a fresh agent is restored from the file and both continue to T2 —
through another dynamics fit, model rollout and GPI-LS iteration — and must agree bit for bit. Slow: ``prism fit``
with ``agent.name=gpi_pd`` killed with SIGKILL mid-RL and resumed writes the same eval.csv as a run left alone.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from subprocess_runs import kill_when as _kill_when
from subprocess_runs import run_ok as _run

from prism.agents.gpi_pd.agent import GPIPDAgent
from prism.agents.gpi_pd.config import GPIPDConfig
from prism.envs import TOY_SPEC, make_env
from prism.run.checkpoint import _global_rng_state, _set_global_rng_state
from prism.run.checkpoint_files import save_atomic, torch_load

CHECKPOINT_AT, TOTAL = 170, 310
"""Before T1 = 170: fits every 40 steps from 40, rollouts every 30 from 90, a GPI-LS iteration at 100, PER updates
from 40; after it: a rollout at 180 (before the next fit, at 200), fits to 280, rollouts to 300, iterations at 200
and 300."""


def _config() -> GPIPDConfig:
    return GPIPDConfig(
        learning_starts=40,
        batch_size=32,
        buffer_size=2000,
        net_arch=[16, 16],
        gradient_updates=2,
        timesteps_per_iter=100,
        eval_episodes_per_weight=1,
        corner_weights_top_k=1,
        dynamics_net_arch=[16, 16],
        dynamics_train_freq=40,
        dynamics_rollout_len=3,
        dynamics_rollout_starts=80,
        dynamics_rollout_freq=30,
        dynamics_rollout_batch_size=64,
        dynamics_buffer_size=5000,
        dynamics_min_uncertainty=50.0,
        dynamics_real_ratio=0.25,
        log_every=40,
        steps_per_batch=7,  # batches straddle the checkpoint step: pause_at must end one exactly there
    )


def _agent() -> GPIPDAgent:
    # A sparse wrapper with a release stream of its own: the training env's and the eval env's both move on.
    factory = lambda _member: make_env(TOY_SPEC, sparse_channel=0, p_rel=0.3, seed=5)  # noqa: E731
    return GPIPDAgent(_config(), TOY_SPEC, factory, seeds=[3], target_env_steps=TOTAL)


def _trainer(*callbacks: Callback) -> L.Trainer:
    return L.Trainer(
        max_epochs=-1,
        logger=False,
        callbacks=list(callbacks),
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
        devices=1,
    )


class SaveAt(Callback):
    """Saves what prism's RunCheckpointer saves of the agent (prism.run.checkpoint.collect_state) at one step."""

    def __init__(self, step: int, path: Path):
        self.step, self.path = step, path
        self.seen: dict[str, Any] = {}

    def on_train_start(self, trainer, agent) -> None:
        agent.pause_at(self.step)

    def on_train_batch_end(self, trainer, agent, outputs, batch, batch_idx) -> None:
        if agent.env_step_count != self.step:
            return
        payload = {
            "agent": agent.state_dict(),
            "optimizers": [opt.state_dict() for opt in trainer.optimizers],
            "agent_runtime": agent.runtime_state(),
            "rng": _global_rng_state(),
        }
        save_atomic(payload, self.path)
        self.seen = {
            "fitted": agent._dynamics_fitted,
            "model_rows": len(agent.model_buffer),
            "ccs": len(agent.linear_support.ccs),
            "visited": len(agent.linear_support.visited),
            "eval_env": agent._eval_env is not None,
            "distinct_priorities": len(torch.unique(agent.per.priorities[0, : agent.per.sizes[0]])),
            "updates": agent.n_updates,
            "episode_length": int(agent._episode_length[0]),
        }


class RestoreFrom(Callback):
    """Restores the agent as prism.run.checkpoint.restore_state does (before the agent's own on_fit_start)."""

    def __init__(self, path: Path):
        self.path = path

    def on_fit_start(self, trainer, agent) -> None:
        state = torch_load(self.path)  # weights_only=True, as --resume loads
        agent.load_state_dict(state["agent"])
        for optimizer, opt_state in zip(trainer.optimizers, state["optimizers"]):
            optimizer.load_state_dict(opt_state)
        agent.load_runtime_state(state["agent_runtime"])
        _set_global_rng_state(state["rng"])


def _assert_same(a: Any, b: Any, where: str = "") -> None:
    """Recursive exact equality of tensors, arrays and containers."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: {sorted(a)} != {sorted(b)}"
        for key in a:
            _assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[GPIPDAgent, GPIPDAgent, L.Trainer, L.Trainer, dict[str, Any]]:
    path = tmp_path_factory.mktemp("gpi_pd_resume") / "last.pt"
    torch.manual_seed(0)
    straight, save = _agent(), SaveAt(CHECKPOINT_AT, path)
    straight_trainer = _trainer(save)
    straight_trainer.fit(straight)
    torch.manual_seed(1)  # a different global stream: the restored run must take the checkpoint's
    resumed = _agent()
    resumed_trainer = _trainer(RestoreFrom(path))
    resumed_trainer.fit(resumed)
    return straight, resumed, straight_trainer, resumed_trainer, save.seen


def test_checkpoint_is_taken_after_every_gpi_pd_mechanism_ran(runs):
    straight, _, _, _, seen = runs
    assert seen["fitted"] and seen["model_rows"] > 0, seen  # a fit and a rollout into the model buffer
    assert seen["ccs"] >= 1 and seen["eval_env"], seen  # a GPI-LS iteration with its eval env
    assert seen["distinct_priorities"] > 2 and seen["updates"] > 0, seen  # PER updates
    assert seen["episode_length"] > 0, seen  # mid-episode
    # The continuation ran another GPI-LS iteration (and fits/rollouts, by the schedule above).
    assert len(straight.linear_support.visited) > seen["visited"]
    assert straight.env_step_count == TOTAL


def test_resumed_agent_matches_the_uninterrupted_one_bit_for_bit(runs):
    straight, resumed, straight_trainer, resumed_trainer, _ = runs
    assert resumed.env_step_count == straight.env_step_count == TOTAL
    _assert_same(straight.state_dict(), resumed.state_dict(), "state_dict")  # networks, targets, model
    _assert_same(straight.buffer.state_dict(), resumed.buffer.state_dict(), "replay")
    _assert_same(straight.model_buffer.state_dict(), resumed.model_buffer.state_dict(), "model_buffer")
    _assert_same(straight.per.state_dict(), resumed.per.state_dict(), "per")
    _assert_same(straight.linear_support.ccs, resumed.linear_support.ccs, "ccs")
    _assert_same(straight.linear_support.support, resumed.linear_support.support, "support")
    _assert_same(
        [o.state_dict() for o in straight_trainer.optimizers],
        [o.state_dict() for o in resumed_trainer.optimizers],
        "optimizers",
    )
    _assert_same(straight.runtime_state(), resumed.runtime_state(), "runtime")


# ---- slow: prism fit killed with SIGKILL mid-RL, then --resume ---------------------------------------------
TINY_GPI_PD = [
    "env.id=prism/Toy-v0",
    "agent.name=gpi_pd",
    "loop.initial_episodes=6",
    "loop.expert_episodes=4",
    "loop.cycles=3",
    "loop.steps_per_cycle=400",
    "loop.checkpoint_every=150",
    "reward.hidden=32",
    "reward.max_epochs=40",
    "reward.patience=40",
    "agent.learning_starts=100",
    "agent.batch_size=32",
    "agent.buffer_size=5000",
    "agent.net_arch=[32,32]",
    "agent.gradient_updates=2",
    "agent.timesteps_per_iter=250",
    "agent.eval_episodes_per_weight=1",
    "agent.corner_weights_top_k=2",
    "agent.dynamics_net_arch=[16,16]",
    "agent.dynamics_train_freq=100",
    "agent.dynamics_rollout_starts=200",
    "agent.dynamics_rollout_freq=50",
    "agent.dynamics_rollout_len=3",
    "agent.dynamics_rollout_batch_size=64",
    "agent.dynamics_buffer_size=5000",
    "agent.dynamics_min_uncertainty=50",
    "agent.log_every=100",
    "eval.every=200",
    "eval.num_weights=3",
    "eval.episodes=1",
    "eval.final.num_weights=3",
    "eval.final.episodes=1",
]


def _gpi_pd_fit_cmd(run_dir: Path) -> list[str]:
    quickstart = str(Path(__file__).resolve().parents[1] / "conf" / "quickstart.yaml")
    return [
        sys.executable,
        "-m",
        "prism.cli",
        "fit",
        "--config",
        quickstart,
        *TINY_GPI_PD,
        f"run_dir={run_dir}",
    ]


@pytest.mark.slow  # three short runs in subprocesses (about 25 s each)
def test_gpi_pd_resume_after_sigkill_mid_rl_writes_the_same_eval_csv(tmp_path):
    reference = tmp_path / "reference"
    _run(_gpi_pd_fit_cmd(reference))
    run_dir = tmp_path / "killed_rl"
    csv_path = run_dir / "eval.csv"

    def mid_rl() -> bool:  # evaluated at 200, 400 and 600: in cycle 2's RL, past GPI-LS iterations and fits
        return (
            (run_dir / "tb" / "reward_fit" / "cycle2").is_dir()
            and csv_path.is_file()
            and csv_path.read_text().count("\n") >= 4
        )

    _kill_when(_gpi_pd_fit_cmd(run_dir), mid_rl)
    assert not (run_dir / "summary.json").exists()
    _run([sys.executable, "-m", "prism.cli", "fit", "--resume", str(run_dir)])
    expected = (reference / "eval.csv").read_bytes()
    assert expected.count(b"\n") >= 7  # header, 6 periodic rows (200..1200) and the final row
    assert csv_path.read_bytes() == expected

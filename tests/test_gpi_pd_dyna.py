"""GPI-PD's Dyna wiring (issue 12): model fits and rollouts on schedule, the real/model split of each update's
batch, ``dyna/`` scalars through ``prism fit``, and determinism of a whole run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from toy_learning import fit_to_end

from prism.agents.gpi_pd.agent import GPIPDAgent
from prism.agents.gpi_pd.config import GPIPDConfig
from prism.data.replay import ReplayBatch
from prism.envs import TOY_SPEC, make_env

CONF = Path(__file__).resolve().parents[1] / "conf"
LEARNING_STARTS, TRAIN_FREQ, ROLLOUT_STARTS, ROLLOUT_FREQ = 40, 40, 120, 40
BATCH, REAL_RATIO = 32, 0.25
N_REAL = int(BATCH * REAL_RATIO)


def tiny_config(**overrides) -> GPIPDConfig:
    values = dict(
        learning_starts=LEARNING_STARTS,
        batch_size=BATCH,
        buffer_size=2000,
        net_arch=[16, 16],
        gradient_updates=1,
        timesteps_per_iter=100,  # GPI-LS iterations run, so batches are doubled with support weights too
        eval_episodes_per_weight=1,
        corner_weights_top_k=1,
        dynamics_net_arch=[16, 16],
        dynamics_train_freq=TRAIN_FREQ,
        dynamics_rollout_len=3,
        dynamics_rollout_starts=ROLLOUT_STARTS,
        dynamics_rollout_freq=ROLLOUT_FREQ,
        dynamics_rollout_batch_size=64,
        dynamics_buffer_size=5000,
        dynamics_min_uncertainty=50.0,
        dynamics_real_ratio=REAL_RATIO,
        log_every=40,
    )
    values.update(overrides)
    return GPIPDConfig(**values)


class RecordingAgent(GPIPDAgent):
    """Records the model buffer's size after every env step and each update's batch (with its real head)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sizes: list[tuple[int, int]] = []
        self.batches: list[tuple[int, int, ReplayBatch, torch.Tensor]] = []

    def env_step(self) -> None:
        super().env_step()
        size = 0 if self.model_buffer is None else len(self.model_buffer)
        self.sizes.append((self._steps, size))

    def update(self, batch: ReplayBatch) -> torch.Tensor:
        self.batches.append((self._steps, self._n_real, batch, self._index.clone()))
        return super().update(batch)


def _fit(config: GPIPDConfig, steps: int) -> RecordingAgent:
    torch.manual_seed(0)
    agent = RecordingAgent(
        config, TOY_SPEC, lambda _member: make_env(TOY_SPEC), seeds=[0], target_env_steps=steps
    )
    fit_to_end(agent)
    return agent


@pytest.fixture(scope="module")
def dyna_agent() -> RecordingAgent:
    return _fit(tiny_config(), steps=220)


def test_model_buffer_fills_from_rollout_starts_and_not_before(dyna_agent):
    sizes = dict(dyna_agent.sizes)
    assert all(size == 0 for step, size in sizes.items() if step < ROLLOUT_STARTS), sizes
    # The model was fitted before the rollouts started (steps 40, 80, 120, ...), so rounds at 120, 160, 200.
    rounds = [ROLLOUT_STARTS + k * ROLLOUT_FREQ for k in range(3)]
    assert sizes[rounds[0]] > 0
    assert sizes[rounds[1]] > sizes[rounds[0]] and sizes[rounds[2]] > sizes[rounds[1]], sizes
    # Between rounds the model buffer does not change.
    assert sizes[rounds[0] + 1] == sizes[rounds[0]] == sizes[rounds[1] - 1]
    # ≤ start states × horizon imagined transitions per round.
    assert sizes[rounds[0]] <= 64 * 3


def test_update_batch_has_the_configured_real_model_split(dyna_agent):
    agent = dyna_agent
    real_rows = agent.buffer.storage[0, : agent.buffer.size]
    model_rows = agent.model_buffer.storage[0, : agent.model_buffer.size]
    obs_dim = TOY_SPEC.obs_dim
    before = [b for b in agent.batches if b[0] < ROLLOUT_STARTS]
    after = [b for b in agent.batches if b[0] >= ROLLOUT_STARTS]
    assert before and after
    for _, n_real, _batch, index in before:
        assert n_real == BATCH and index.shape == (1, BATCH)
    for _, n_real, batch, index in after:
        assert n_real == N_REAL and index.shape == (1, N_REAL)  # only the real rows have PER slots
        rows = batch.obs.shape[0]
        assert rows in (BATCH, 2 * BATCH)  # doubled when the GPI-LS support holds several weights
        head, tail = batch.obs[:N_REAL], batch.obs[N_REAL:BATCH]
        # The head rows are the PER-sampled real transitions, the tail rows come from the model buffer.
        torch.testing.assert_close(head, real_rows[index[0], :obs_dim], rtol=0, atol=0)
        in_model = (tail[:, None, :] == model_rows[None, :, :obs_dim]).all(-1).any(-1)
        assert bool(in_model.all())
    assert any(b[2].obs.shape[0] == 2 * BATCH for b in after)


def test_without_dyna_there_is_no_model_and_batches_are_all_real():
    agent = _fit(tiny_config(dyna=False), steps=ROLLOUT_STARTS + ROLLOUT_FREQ)
    assert agent.dynamics is None and agent.model_buffer is None
    assert all(n_real == BATCH for _, n_real, _, _ in agent.batches)


TINY_RUN = [
    "env.id=prism/Toy-v0",
    "agent.name=gpi_pd",
    "loop.initial_episodes=5",
    "loop.expert_episodes=2",
    "loop.cycles=1",
    "loop.steps_per_cycle=240",
    "loop.checkpoint_every=240",
    "agent.learning_starts=40",
    "agent.batch_size=32",
    "agent.buffer_size=2000",
    "agent.net_arch=[16,16]",
    "agent.gradient_updates=1",
    "agent.timesteps_per_iter=120",
    "agent.eval_episodes_per_weight=1",
    "agent.dynamics_net_arch=[16,16]",
    "agent.dynamics_train_freq=40",
    "agent.dynamics_rollout_len=3",
    "agent.dynamics_rollout_starts=80",
    "agent.dynamics_rollout_freq=40",
    "agent.dynamics_rollout_batch_size=64",
    "agent.dynamics_buffer_size=5000",
    "agent.log_every=80",
    "eval.every=120",
    "eval.num_weights=3",
    "eval.episodes=1",
    "eval.final.num_weights=3",
    "eval.final.episodes=1",
]


def _prism_fit(run_dir: Path) -> None:
    from prism.cli import main

    code = main(["fit", "--config", str(CONF / "quickstart.yaml"), str(CONF / "method" / "baseline.yaml"),
                 *TINY_RUN, f"run_dir={run_dir}"])  # fmt: skip
    assert code == 0


def _scalars(run_dir: Path) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars: dict[str, list[float]] = {}
    for events in run_dir.rglob("events.out.tfevents*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            scalars.setdefault(tag, []).extend(e.value for e in accumulator.Scalars(tag))
    return scalars


def test_prism_fit_logs_dyna_scalars_and_is_deterministic(tmp_path):
    _prism_fit(tmp_path / "a")
    _prism_fit(tmp_path / "b")
    scalars = _scalars(tmp_path / "a")
    for tag in ("dyna/model_holdout_mse", "dyna/fit_epochs", "dyna/rollout_kept", "dyna/rollout_dropped_frac",
                "dyna/model_buffer_size"):  # fmt: skip
        assert tag in scalars, sorted(scalars)
    assert max(scalars["dyna/model_buffer_size"]) > 0
    assert all(0.0 <= f <= 1.0 for f in scalars["dyna/rollout_dropped_frac"])
    eval_a = (tmp_path / "a" / "eval.csv").read_bytes()
    assert eval_a.count(b"\n") >= 3 and eval_a == (tmp_path / "b" / "eval.csv").read_bytes()

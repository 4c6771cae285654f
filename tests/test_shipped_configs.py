"""Every shipped config and overlay trains to the end (tiny budget, real MuJoCo env, in-process ``prism fit``).

``test_loop.py`` only builds them; this runs each through collection, reward fits, RL, the periodic and the
final evaluation, so an overlay whose code path crashes late (as ``ablation/relabel.yaml`` did at its first
reward fit) fails here.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

import prism.reward.shapers as shaping
from prism.cli import main
from prism.config import load_config
from prism.data.replay import ReplayBatch

CONF = Path(__file__).resolve().parents[1] / "conf"
STEPS = 150  # env steps per cycle
FINAL_WEIGHTS = 3  # >= the number of objectives of every shipped env

# After the overlay, so every budget in it (wo_refinement's 200 000 steps too) is overridden; loop.cycles is
# kept, so wo_refinement still runs one cycle and the others two or three.
TINY = [
    f"loop.steps_per_cycle={STEPS}",
    "loop.initial_episodes=3",
    "loop.expert_episodes=2",
    f"loop.checkpoint_every={STEPS}",
    "reward.max_epochs=2",
    "agent.learning_starts=100",
    "agent.buffer_size=5000",
    "agent.batch_size=32",
    f"eval.every={STEPS}",
    "eval.num_weights=3",
    "eval.episodes=1",
    f"eval.final.num_weights={FINAL_WEIGHTS}",
    "eval.final.episodes=1",
    "eval.eum_weights=5",
    "eval.vo_preferences=5",
    "eval.num_workers=0",
]

CONFIGS = [[p] for p in sorted(CONF.glob("*.yaml"))] + [
    [CONF / "hopper.yaml", p] for p in sorted([*CONF.glob("method/*.yaml"), *CONF.glob("ablation/*.yaml")])
]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_relabel_fn_replaces_only_the_sparse_channel():
    """The hook ``reward.relabel`` installs: the sparse channel becomes the model's prediction from h_t."""

    from prism.reward.model import RewardModelBase

    class SumModel(
        RewardModelBase
    ):  # predicts the sum of its features [s, a, r_dense]: easy to check by hand
        def predict(self, features):
            return features.sum(dim=1)

        def to_dict(self):
            return {}

    gen = torch.Generator().manual_seed(0)
    batch = ReplayBatch(
        *(torch.randn(4, d, generator=gen) for d in (3, 2, 3, 3)), torch.zeros(4), torch.rand(4, 3)
    )
    out = shaping.make_relabel_fn(SumModel(), sparse_channel=1)(batch)
    expected = batch.obs.sum(1) + batch.action.sum(1) + batch.reward[:, 0] + batch.reward[:, 2]
    torch.testing.assert_close(out.reward[:, 1], expected)
    torch.testing.assert_close(out.reward[:, [0, 2]], batch.reward[:, [0, 2]])
    for name in ("obs", "action", "next_obs", "done", "weight"):
        assert getattr(out, name) is getattr(batch, name)


@pytest.mark.slow
@pytest.mark.parametrize("files", CONFIGS, ids=lambda fs: "+".join(f.stem for f in fs))
def test_shipped_config_trains_to_the_end(files, tmp_path, monkeypatch, capsys):
    relabel_calls = []
    original = shaping.relabel_rewards

    def counting_relabel(*args, **kwargs):
        relabel_calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(shaping, "relabel_rewards", counting_relabel)
    run_dir = tmp_path / "run"
    overrides = [*TINY, f"run_dir={run_dir}"]
    assert main(["fit", "--config", *map(str, files), *overrides]) == 0

    config = load_config(files, overrides)
    total = config.loop.cycles * STEPS
    rows = _rows(run_dir / "eval.csv")
    periodic = [r for r in rows if r["final"] == "0"]
    assert [int(r["env_steps"]) for r in periodic] == list(range(STEPS, total + 1, STEPS))
    final = rows[-1]
    assert final["final"] == "1" and int(final["env_steps"]) == total
    assert sum(r["final"] == "1" for r in rows) == 1
    assert float(final["hv"]) >= 0.0 and float(final["mean_episode_length"]) > 0
    with (run_dir / "front.csv").open() as fh:
        assert len(fh.read().strip().splitlines()) == 1 + FINAL_WEIGHTS
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == total and summary["final_protocol"]["num_weights"] == FINAL_WEIGHTS
    assert "tensorboard --logdir" in capsys.readouterr().out
    # reward.relabel: the replay batches are relabelled by the current model (and only then)
    if config.reward.relabel:
        assert len(relabel_calls) > 0
    else:
        assert relabel_calls == []


@pytest.mark.parametrize("env_file", ["hopper", "walker", "halfcheetah", "swimmer", "quickstart"])
def test_the_lite_fit_overlay_sets_the_residual_free_network_and_nothing_else(env_file):
    """conf/fit/lite.yaml swaps ReSymNet's network for the residual-free one; every other key stays the env
    file's, and the env files keep the paper's residual network as the default."""
    import dataclasses

    base = load_config([CONF / f"{env_file}.yaml"])
    lite = load_config([CONF / f"{env_file}.yaml", CONF / "fit" / "lite.yaml"])
    assert base.reward.residual is True and lite.reward.residual is False
    assert dataclasses.replace(lite.reward, residual=True) == base.reward
    assert dataclasses.replace(lite, reward=base.reward) == base
    with_method = load_config(
        [CONF / f"{env_file}.yaml", CONF / "method" / "prism.yaml", CONF / "fit" / "lite.yaml"]
    )
    assert with_method.reward.residual is False and with_method.method == "prism"

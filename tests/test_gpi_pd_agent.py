"""GPIPDAgent: refuses populations, and learns on the toy env (its EUM clearly beats the random policy's)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from toy_learning import eum, fit_to_end, per_weight_returns, random_policy_return

from prism.agents.gpi_pd.agent import GPIPDAgent
from prism.agents.gpi_pd.config import GPIPDConfig
from prism.envs import TOY_SPEC, make_env

# Measured (seed 0, 2000 steps, this test's config): random EUM ≈ −7.0; the *untrained* deterministic policy
# already ≈ +1.2 (it barely moves, so pays no energy), trained ≈ +2.3 with outward progress at least 3.7 above
# the untrained policy's for every weight. A 4 × 200 dynamics model (the default) gives the same (+2.3, 3.8)
# at twice the CPU time (75 s vs 36 s).
MARGIN_RANDOM = 5.0
MARGIN_UNTRAINED_EUM = 0.4
MARGIN_OUTWARD = 2.5


def test_refuses_more_than_one_seed():
    with pytest.raises(ValueError, match=r"^seeds: "):
        GPIPDAgent(GPIPDConfig(), TOY_SPEC, lambda _member: make_env(TOY_SPEC), seeds=(0, 1))


def test_gpi_pd_beats_random_and_untrained_policy_on_toy_env():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        L.seed_everything(0)
        config = GPIPDConfig(
            learning_starts=300,
            buffer_size=20_000,
            net_arch=[64, 64],
            gradient_updates=1,
            timesteps_per_iter=500,
            eval_episodes_per_weight=1,
            dynamics_rollout_batch_size=5000,  # the toy needs no 50 000 imagined starts per round
            dynamics_net_arch=[64, 64],  # nor a 4 × 200 dynamics model (its fits were half the time)
        )
        agent = GPIPDAgent(
            config, TOY_SPEC, lambda _member: make_env(TOY_SPEC), seeds=[0], target_env_steps=2000
        )
        untrained = per_weight_returns(agent)
        fit_to_end(agent)
        random_return = random_policy_return()
        trained = per_weight_returns(agent)
        eum_trained, eum_untrained, eum_random = eum(trained), eum(untrained), eum(random_return)
        info = (eum_trained, eum_untrained, eum_random, trained, untrained)
        assert eum_trained > eum_random + MARGIN_RANDOM, info
        assert eum_trained > eum_untrained + MARGIN_UNTRAINED_EUM, info
        assert (trained[:, 0] > untrained[:, 0] + MARGIN_OUTWARD).all(), info
        assert len(agent.linear_support.ccs) >= 1  # GPI-LS iterations ran and filled the CCS
    finally:
        torch.set_num_threads(threads)


def test_gpi_pd_population_is_refused_with_one_line(tmp_path, capsys):
    from prism.cli import main

    conf = Path(__file__).resolve().parents[1] / "conf"
    code = main(["fit", "--config", str(conf / "quickstart.yaml"), "agent.name=gpi_pd", "seeds=[0,1]",
                 f"run_dir={tmp_path / 'run'}"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("prism: error: seeds:") and "gpi_pd" in err[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize("method", ["oracle", "baseline", "prism"])
def test_gpi_pd_runs_every_method_through_prism_fit(method, tmp_path):
    """`agent.name=gpi_pd` selects GPI-PD's own keys and trains through the whole loop (collection, fits and
    shaping for PRISM), writing eval.csv with the final row and its own `train/` scalars."""
    import csv

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from prism.cli import main

    conf = Path(__file__).resolve().parents[1] / "conf"
    run_dir = tmp_path / method
    code = main(
        ["fit", "--config", str(conf / "quickstart.yaml"), str(conf / "method" / f"{method}.yaml"),
         "agent.name=gpi_pd", "agent.gradient_updates=1", "agent.learning_starts=100", "agent.log_every=100",
         "loop.initial_episodes=10", "loop.expert_episodes=2", "loop.steps_per_cycle=200", "reward.max_epochs=2",
         "eval.every=200", "eval.num_weights=3", "eval.episodes=1", "eval.final.num_weights=3",
         "eval.final.episodes=1", f"run_dir={run_dir}"]
    )  # fmt: skip
    assert code == 0
    rows = list(csv.DictReader((run_dir / "eval.csv").open()))
    assert [(int(r["env_steps"]), r["final"]) for r in rows][-2:] == [(600, "0"), (600, "1")]
    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    assert any(tag.startswith("train/") for tag in events.Tags()["scalars"])
    assert yaml_agent_name(run_dir) == "gpi_pd"


def yaml_agent_name(run_dir: Path) -> str:
    import yaml

    return yaml.safe_load((run_dir / "config.yaml").read_text())["agent"]["name"]

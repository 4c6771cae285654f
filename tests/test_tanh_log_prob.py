"""``agent.tanh_log_prob``: the exact tanh correction (the default) and morl-baselines' epsilon form, each
against an independent computation, and the epsilon form against morl-baselines' own ``Policy.sample``."""

from __future__ import annotations

import math

import pytest
import torch

from prism.agents.networks import sample_tanh_gaussian
from prism.config import load_config
from prism.core.errors import ConfigError


def _by_hand(
    mean: torch.Tensor, log_std: torch.Tensor, eps: torch.Tensor, epsilon: float | None
) -> torch.Tensor:
    """log π(tanh u) in float64 from torch.distributions: Normal's log-density minus log(1 − tanh² u [+ ε])."""
    mean, log_std, eps = mean.double(), log_std.double(), eps.double()
    u = mean + log_std.exp() * eps
    normal = torch.distributions.Normal(mean, log_std.exp()).log_prob(u)
    if (
        epsilon is None
    ):  # exact: 1 − tanh² u = sech² u, as 4 e^{-2|u|} / (1 + e^{-2|u|})² without cancellation
        log_det = math.log(4.0) - 2.0 * u.abs() - 2.0 * torch.log1p(torch.exp(-2.0 * u.abs()))
    else:
        log_det = torch.log(1.0 - torch.tanh(u).float().double().square() + epsilon)
    return (normal - log_det).sum(dim=-1)


def _draw(scale: float):
    gen = torch.Generator().manual_seed(3)
    mean = scale * torch.randn(64, 6, generator=gen)
    log_std = torch.empty(64, 6).uniform_(-2.0, 1.0, generator=gen)
    return mean, log_std


@pytest.mark.parametrize("form", ["exact", "epsilon"])
def test_each_form_equals_its_formula_computed_independently(form):
    mean, log_std = _draw(scale=4.0)
    _, log_prob = sample_tanh_gaussian(mean, log_std, torch.Generator().manual_seed(7), form)
    eps = torch.randn(mean.shape, generator=torch.Generator().manual_seed(7))  # the same draw
    expected = _by_hand(mean, log_std, eps, None if form == "exact" else 1e-6)
    if form == "epsilon":
        expected = expected.clamp(-1e3, 1e3)
    torch.testing.assert_close(log_prob.double(), expected, rtol=1e-4, atol=1e-3)


def test_the_forms_agree_off_saturation_and_part_where_a_mean_saturates():
    gen = torch.Generator().manual_seed(0)
    mean, log_std = 0.5 * torch.randn(256, 6, generator=gen), torch.full((256, 6), -1.0)
    a_exact, lp_exact = sample_tanh_gaussian(mean, log_std, torch.Generator().manual_seed(1), "exact")
    a_eps, lp_eps = sample_tanh_gaussian(mean, log_std, torch.Generator().manual_seed(1), "epsilon")
    assert torch.equal(a_exact, a_eps)  # the same action either way
    torch.testing.assert_close(lp_eps, lp_exact, rtol=0, atol=1e-2)
    # a mean of 12 in one dimension: the exact correction charges ~2|u| − 2 log 2 ≈ 22.6 nats, the epsilon
    # form at most −log 1e-6 ≈ 13.8
    saturated = torch.zeros(1, 6)
    saturated[0, 0] = 12.0
    small = torch.full((1, 6), -20.0)  # σ ≈ 2e-9: u = μ
    _, lp_exact = sample_tanh_gaussian(saturated, small, torch.Generator().manual_seed(1), "exact")
    _, lp_eps = sample_tanh_gaussian(saturated, small, torch.Generator().manual_seed(1), "epsilon")
    assert float(lp_exact - lp_eps) == pytest.approx(
        (2 * 12.0 - 2 * math.log(2.0)) + math.log(1e-6), abs=0.05
    )


def test_the_epsilon_form_equals_morl_baselines_capql_policy_sample():
    capql = pytest.importorskip("morl_baselines.multi_policy.capql.capql")
    import gymnasium

    space = gymnasium.spaces.Box(-1.0, 1.0, (6,))
    policy = capql.Policy(obs_dim=17, rew_dim=2, output_dim=6, action_space=space, net_arch=[32, 32])
    obs, w = torch.randn(50, 17, generator=torch.Generator().manual_seed(2)), torch.full((50, 2), 0.5)
    with torch.no_grad():
        policy.mean.weight.mul_(40.0)  # some means far past saturation, where the forms part
        mean, log_std = policy(obs, w)
        torch.manual_seed(11)
        action, log_prob, _ = policy.sample(obs, w)
        ours_action, ours = sample_tanh_gaussian(mean, log_std, torch.Generator().manual_seed(11), "epsilon")
    assert (mean.abs() > 9).any()
    torch.testing.assert_close(ours_action, action)
    torch.testing.assert_close(ours, log_prob, rtol=1e-5, atol=1e-4)


def test_the_config_key_defaults_to_exact_and_refuses_an_unknown_form():
    assert load_config([], []).agent.tanh_log_prob == "exact"
    assert load_config([], ["agent.tanh_log_prob=epsilon"]).agent.tanh_log_prob == "epsilon"
    with pytest.raises(ConfigError, match="agent.tanh_log_prob"):
        load_config([], ["agent.tanh_log_prob=clamped"])


@pytest.mark.parametrize("form", ["exact", "epsilon"])
def test_a_run_computes_every_log_prob_of_its_updates_in_the_configured_form(form, tmp_path, monkeypatch):
    from pathlib import Path

    from toy_runs import toy_run

    import prism.agents.losses as losses
    from prism.cli import main

    seen: list[str] = []
    real = losses.sample_tanh_gaussian

    def recording(mean, log_std, generator=None, log_prob_form="exact"):
        seen.append(log_prob_form)
        return real(mean, log_std, generator, log_prob_form)

    monkeypatch.setattr(losses, "sample_tanh_gaussian", recording)
    quickstart = str(Path(__file__).resolve().parents[1] / "conf" / "quickstart.yaml")
    overrides = {"method": "oracle", "env.dense": "true", "reward.name": "none", "agent.symreg_lambda": 0,
                 "agent.tanh_log_prob": form}  # fmt: skip
    main(["fit", "--config", quickstart, *toy_run(overrides), f"run_dir={tmp_path / 'run'}"])
    assert len(seen) >= 2 and set(seen) == {form}  # the critic's target and the actor's loss, every update
    assert f"tanh_log_prob: {form}" in (tmp_path / "run" / "config.yaml").read_text()

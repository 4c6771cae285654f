"""GPI-PD's Dyna part (issue 12): the probabilistic ensemble dynamics model and its uncertainty-filtered rollouts.

The ensemble is fitted once (module fixture, small MLPs) on a known linear system ``s' = A s + B a + noise``,
``r = C s`` and checked against the system itself; the formulas are checked against independent forms."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from prism.agents.gpi_pd.dynamics import (
    TERMINATION_FNS,
    ProbabilisticEnsemble,
    bound_logvar,
    ensemble_uncertainty,
    gaussian_nll,
)
from prism.data.replay import ReplayBatch, ReplayBuffer

OBS, ACT, L = 3, 2, 2
HIDDEN = (64, 64)
A = torch.tensor([[0.9, 0.1, 0.0], [0.0, 0.8, 0.2], [0.1, 0.0, 0.85]])
B = torch.tensor([[0.5, -0.3], [0.2, 0.4], [-0.4, 0.1]])
C = torch.tensor([[1.0, -0.5, 0.3], [0.2, 0.7, -1.0]])
NOISE = 0.01


def linear_system(n: int, seed: int) -> ReplayBatch:
    g = torch.Generator().manual_seed(seed)
    s = torch.rand(n, OBS, generator=g) * 2 - 1
    a = torch.rand(n, ACT, generator=g) * 2 - 1
    s_next = s @ A.T + a @ B.T + NOISE * torch.randn(n, OBS, generator=g)
    return ReplayBatch(s, a, s @ C.T, s_next, torch.zeros(n), torch.full((n, L), 1.0 / L))


def new_model(seed: int = 1, **kwargs) -> ProbabilisticEnsemble:
    return ProbabilisticEnsemble(
        OBS, ACT, L, hidden=HIDDEN, generator=torch.Generator().manual_seed(seed), **kwargs
    )


def elite_mean_error(model: ProbabilisticEnsemble, data: ReplayBatch) -> float:
    """MSE of the elites' predicted means against the noiseless system, on ``data``."""
    with torch.no_grad():
        mean, _ = model.predict(data.obs, data.action)
    truth = torch.cat([data.obs @ A.T + data.action @ B.T - data.obs, data.obs @ C.T], dim=-1)
    return float((mean[model.elites] - truth).square().mean())


def zero_policy(obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.zeros(obs.shape[0], ACT)


@pytest.fixture(scope="module")
def fitted():
    model = new_model()
    test = linear_system(500, seed=99)
    before = elite_mean_error(model, test)
    with torch.no_grad():
        nll_before = float(model.loss(torch.cat([test.obs, test.action], -1), _targets(test)))
    result = model.fit(linear_system(1000, seed=0), torch.Generator().manual_seed(2), max_epochs=60)
    return model, result, before, test, nll_before


def _targets(data: ReplayBatch) -> torch.Tensor:
    return torch.cat([data.next_obs - data.obs, data.reward], dim=-1)


def test_fit_learns_the_linear_system(fitted):
    model, result, before, test, _ = fitted
    after = elite_mean_error(model, test)
    assert after < 5e-3, after
    assert before > 20 * 5e-3, before  # the untrained model is far off
    assert len(result.elites) == 2 and model.elites.tolist() == sorted(result.elites)
    # The elites are the members with the lowest hold-out MSE.
    assert max(result.holdout_mse[k] for k in result.elites) <= min(
        v for k, v in enumerate(result.holdout_mse) if k not in result.elites
    )


def test_fit_decreases_the_nll(fitted):
    model, result, _, test, nll_before = fitted
    assert result.train_loss[-1] < result.train_loss[0] - 1.0
    with torch.no_grad():
        nll_after = float(model.loss(torch.cat([test.obs, test.action], -1), _targets(test)))
    assert nll_after < nll_before - 1.0, (nll_before, nll_after)


def test_fit_stops_when_the_holdout_stalls():
    # The stopping rule, replayed on the returned hold-out history: stop after `patience` epochs in a row in
    # which no member beat its best hold-out MSE by more than 1 % (relative); never earlier.
    patience = 2
    result = new_model().fit(linear_system(200, seed=3), torch.Generator().manual_seed(0), patience=patience)
    assert result.epochs < 200 and len(result.train_loss) == len(result.holdout_history) == result.epochs
    best, stale = result.holdout_history[0], []
    for mse in result.holdout_history[1:]:
        improved = [(b - v) / b > 0.01 for b, v in zip(best, mse)]
        best = [v if i else b for b, v, i in zip(best, mse, improved)]
        stale.append(not any(improved))
    assert stale[-patience:] == [True] * patience
    assert all(not all(stale[i : i + patience]) for i in range(len(stale) - patience))


def test_rollout_stops_uncertain_rows_and_keeps_the_rest(fitted):
    model, *_ = fitted
    start = linear_system(40, seed=5).obs
    far = start[:10] + 50.0  # far outside the data: the members' ReLU extrapolations disagree
    weight = torch.tensor([0.3, 0.7])
    out = model.rollout(
        torch.cat([start, far]),
        zero_policy,
        weight,
        horizon=5,
        threshold=2.0,
        generator=torch.Generator().manual_seed(0),
    )
    n_in, n_far = 40, 10
    # Every in-distribution row survives all 5 steps; each far row is proposed once, dropped and stopped.
    assert out.uncertainty.shape == (5 * n_in + n_far,)
    assert out.kept.sum() == 5 * n_in == out.batch.obs.shape[0]
    first_step = out.uncertainty[: n_in + n_far]
    assert (first_step[:n_in] < 2.0).all() and (first_step[n_in:] >= 2.0).all()
    assert out.batch.obs.abs().max() < 5.0  # no transition from the far rows
    assert torch.equal(out.batch.weight, weight.expand(5 * n_in, L))
    # The imagined steps follow the system (one-step mean prediction error of the stored transitions is small).
    truth = out.batch.obs @ A.T + out.batch.action @ B.T
    assert float((out.batch.next_obs - truth).square().mean()) < 0.05
    # The first step's rewards are the model's (r = C s), the stored shaped channel included.
    assert float((out.batch.reward[:n_in] - start @ C.T).square().mean()) < 0.05

    # morl-baselines' semantics: drop the uncertain transitions but keep rolling out those rows.
    cont = model.rollout(
        torch.cat([start, far]),
        zero_policy,
        weight,
        horizon=5,
        threshold=2.0,
        generator=torch.Generator().manual_seed(0),
        stop_uncertain=False,
    )
    assert cont.uncertainty.shape == (5 * (n_in + n_far),)


def test_rollout_with_a_forced_huge_variance_member_drops_everything(fitted):
    model, *_ = fitted
    state = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        with torch.no_grad():
            model.net.biases[-1][0, 0, : model.out_dim] += 100.0  # member 0's mean jumps: huge disagreement
        out = model.rollout(
            linear_system(20, seed=5).obs,
            zero_policy,
            torch.tensor([0.5, 0.5]),
            generator=torch.Generator().manual_seed(0),
        )
        assert out.batch.obs.shape[0] == 0 and out.uncertainty.shape == (20,) and not out.kept.any()
    finally:
        model.load_state_dict(state)


def test_rollout_termination_stops_rows_and_marks_done(fitted):
    model, *_ = fitted
    start = linear_system(30, seed=6).obs

    def past_zero(obs, action, next_obs, reward):
        return next_obs[:, 0] > 0.0

    out = model.rollout(
        start,
        zero_policy,
        torch.tensor([0.5, 0.5]),
        horizon=5,
        generator=torch.Generator().manual_seed(1),
        termination_fn=past_zero,
    )
    done = out.batch.done.bool()
    assert done.any() and torch.equal(done, out.batch.next_obs[:, 0] > 0.0)
    assert out.uncertainty.shape[0] < 5 * 30  # terminated rows do not continue


def test_fit_and_rollout_are_deterministic_given_the_generator():
    data = linear_system(300, seed=0)

    def run(fit_seed: int):
        model = new_model(seed=4)
        result = model.fit(data, torch.Generator().manual_seed(fit_seed), max_epochs=3)
        out = model.rollout(
            data.obs[:50], zero_policy, torch.tensor([0.5, 0.5]), generator=torch.Generator().manual_seed(7)
        )
        return model.state_dict(), result, out

    (s1, r1, o1), (s2, r2, o2), (s3, _, _) = run(0), run(0), run(1)
    assert all(torch.equal(s1[k], s2[k]) for k in s1) and r1 == r2
    assert all(torch.equal(a, b) for a, b in zip(o1.batch, o2.batch))
    assert not torch.equal(s1["net.weights.0"], s3["net.weights.0"])  # a different generator does differ
    assert not torch.equal(new_model(seed=4).net.weights[0], new_model(seed=5).net.weights[0])


def test_shapes_with_the_ensemble_dimension():
    model = ProbabilisticEnsemble(11, 3, 3)  # the defaults: 5 members, [200]×4
    assert model.ensemble_size == 5 and model.n_elites == 2 and model.elites.tolist() == [0, 1, 2, 3, 4]
    assert [tuple(w.shape) for w in model.net.weights] == [(5, 14, 200)] + [(5, 200, 200)] * 3 + [
        (5, 200, 28)
    ]
    mean, logvar = model.predict(torch.zeros(7, 11), torch.zeros(7, 3))
    assert mean.shape == logvar.shape == (5, 7, 14)
    assert (logvar <= model.max_logvar).all() and (logvar >= model.min_logvar).all()
    out = model.rollout(
        torch.zeros(4, 11),
        lambda o, w: torch.zeros(o.shape[0], 3),
        torch.ones(3) / 3,
        horizon=2,
        threshold=1e9,
        generator=torch.Generator().manual_seed(0),
    )
    batch = out.batch
    assert batch.obs.shape == batch.next_obs.shape == (8, 11) and batch.action.shape == (8, 3)
    assert batch.reward.shape == batch.weight.shape == (8, 3) and batch.done.shape == (8,)
    buffer = ReplayBuffer(16, 11, 3, 3)  # a model buffer takes the batch as it is
    buffer.add_batch(batch)
    assert len(buffer) == 8


def test_formulas_against_independent_forms():
    g = torch.Generator().manual_seed(0)
    mean, logvar = torch.randn(5, 9, 4, generator=g), torch.randn(5, 9, 4, generator=g)
    # Law of total variance: mixture var = E_k[σ²] + Var_k[μ] (population variance).
    mixture_var = logvar.exp().mean(0) + mean.var(0, unbiased=False)
    torch.testing.assert_close(ensemble_uncertainty(mean, logvar), mixture_var.sqrt().sum(-1))
    target = torch.randn(5, 9, 4, generator=g)
    torch.testing.assert_close(
        gaussian_nll(mean, logvar, target).mean(),
        F.gaussian_nll_loss(mean, target, logvar.exp(), reduction="mean"),
    )
    raw = torch.linspace(-14.0, 4.0, 37)
    bounded = bound_logvar(raw, torch.tensor(0.5), torch.tensor(-10.0))
    assert (bounded.diff() > 0).all() and bounded.max() < 0.5 and bounded.min() > -10.0
    extremes = bound_logvar(torch.tensor([-1e3, 1e3]), torch.tensor(0.5), torch.tensor(-10.0))
    torch.testing.assert_close(extremes, torch.tensor([-10.0, 0.5]), atol=1e-4, rtol=0)


def test_known_termination_functions():
    healthy = torch.tensor([[1.2, 0.0, 0.1], [0.5, 0.0, 0.1], [1.2, 0.3, 0.1]])
    assert TERMINATION_FNS["mo-hopper-v5"](None, None, healthy, None).tolist() == [False, True, True]
    assert TERMINATION_FNS["mo-walker2d-v5"](None, None, healthy, None).tolist() == [False, True, False]

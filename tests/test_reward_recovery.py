"""Recovery of a known nonlinear per-step reward from episode sums only (issue acceptance)."""

from __future__ import annotations

import pytest
import torch

from prism.data.segments import SegmentStore
from prism.reward.config import ReSymNetConfig
from prism.reward.losses import pearson_correlation
from prism.reward.models.resymnet_fit import fit_resymnet_model


def _true_reward(x: torch.Tensor) -> torch.Tensor:
    # Nonlinear in h_t, positive on average so that segment sums are far from 0 (relative errors are meaningful).
    return 2.0 + torch.sin(2.0 * x[:, 0]) + 0.5 * x[:, 1] ** 2 - 0.5 * x[:, 2] * x[:, 3]


def _episodes(n_episodes: int, seed: int) -> SegmentStore:
    """Episodes of random length 2–20, released only at the end (p_rel = 0)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 21, (n_episodes,), generator=g)
    store = SegmentStore(obs_dim=4, act_dim=0, n_dense=0)
    x = torch.randn(int(lengths.sum()), 4, generator=g)
    r = _true_reward(x)
    start = 0
    for t in lengths.tolist():
        released = torch.zeros(t, dtype=torch.bool)
        released[-1] = True
        emitted = torch.zeros(t)
        emitted[-1] = r[start : start + t].sum()
        store.add_episode(x[start : start + t], released, emitted, r[start : start + t])
        start += t
    return store


@pytest.mark.slow  # a full ReSymNet fit to convergence
def test_recovers_per_step_reward_from_episode_sums():
    torch.manual_seed(0)
    train_store = _episodes(600, seed=0)
    cfg = ReSymNetConfig(
        ensemble_size=1,
        hidden=64,
        dropout=0.0,
        batch_size=8,
        max_epochs=30,
        patience=30,
        use_dense_features=False,
    )
    model = fit_resymnet_model(train_store, cfg, seed=0)
    assert model.summary.val_correlation > 0.85  # on the fit's own validation split

    # Held out: fresh episodes the fit never saw.
    test_store = _episodes(200, seed=1)
    pred = model.model.predict(test_store.features)
    corr = float(pearson_correlation(pred, test_store.true_sparse))
    assert corr >= 0.9, corr
    sums = torch.zeros(test_store.num_segments).index_add_(0, test_store.segment_index, pred)
    rel_err = float(((sums - test_store.targets).abs() / test_store.targets.abs()).mean())
    assert rel_err <= 0.05, rel_err
    # Sanity: the targets really are the sums of the true per-step rewards.
    truth = torch.zeros(test_store.num_segments).index_add_(
        0, test_store.segment_index, test_store.true_sparse
    )
    torch.testing.assert_close(truth, test_store.targets, rtol=1e-5, atol=1e-4)

"""Prioritised replay sampler: frequencies vs P(i), IS weights vs brute force, priority bookkeeping."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from prism.agents.gpi_pd.per import PrioritySampler


def _filled(priorities: list[float], capacity: int = 8, members: int = 1) -> PrioritySampler:
    per = PrioritySampler(capacity, members=members)
    for m in range(members):
        per.on_add(m, np.arange(len(priorities)))
    index = torch.arange(len(priorities)).repeat(members, 1)
    per.update(index, torch.tensor(priorities, dtype=torch.float64).repeat(members, 1))
    return per


def test_sampling_frequencies_match_probabilities_chi_square():
    scipy_stats = pytest.importorskip("scipy.stats")
    p = [0.5, 2.0, 1.0, 0.1, 4.0]
    per = _filled(p, capacity=8)
    draws = 200_000
    index = per.sample(draws, [torch.Generator().manual_seed(0)])[0].numpy()
    assert index.max() < len(p)  # empty slots (priority 0) are never drawn
    counts = np.bincount(index, minlength=len(p))
    expected = np.asarray(p) / sum(p) * draws
    _, pvalue = scipy_stats.chisquare(counts, expected)
    assert pvalue > 1e-3
    # and a uniform sampler would be rejected by the same test
    _, p_uniform = scipy_stats.chisquare(counts, np.full(len(p), draws / len(p)))
    assert p_uniform < 1e-10


def test_importance_weights_vs_brute_force():
    p = np.array([0.5, 2.0, 1.0, 0.1, 4.0])
    per = _filled(p.tolist(), capacity=8)
    index = torch.tensor([[0, 3, 4, 4, 1]])
    beta = 0.4
    prob = p / p.sum()
    raw = (len(p) * prob) ** (-beta)
    want = raw[index[0].numpy()] / raw.max()
    np.testing.assert_allclose(per.importance_weights(index, beta)[0].numpy(), want, rtol=1e-6)
    assert torch.equal(per.importance_weights(index, 0.0), torch.ones(1, 5))


def test_new_slots_get_the_running_max_and_duplicates_keep_the_first_value():
    per = PrioritySampler(4, initial_priority=1e-5)
    per.on_add(0, [0, 1])
    assert per.priorities[0, :2].tolist() == [1e-5, 1e-5]
    per.update(torch.tensor([[1, 0, 1]]), torch.tensor([[3.0, 0.5, 7.0]], dtype=torch.float64))
    assert per.priorities[0, :2].tolist() == [0.5, 3.0]  # slot 1: first occurrence (3.0), not 7.0
    assert per.max_priority.item() == 7.0  # the running max still saw 7.0 (as morl-baselines)
    per.on_add(0, [2])
    assert per.priorities[0, 2].item() == 7.0
    per.update(torch.tensor([[2]]), torch.tensor([[0.2]], dtype=torch.float64))
    assert per.max_priority.item() == 7.0  # never decreases
    torch.testing.assert_close(
        per.probabilities(0)[:3], torch.tensor([0.5, 3.0, 0.2], dtype=torch.float64) / 3.7
    )


def test_members_sample_from_their_own_priorities_and_streams():
    per = PrioritySampler(4, members=2)
    per.on_add(0, [0, 1])
    per.on_add(1, [0, 1])
    per.update(
        torch.tensor([[0, 1], [0, 1]]), torch.tensor([[1.0, 0.0001], [0.0001, 1.0]], dtype=torch.float64)
    )
    idx = per.sample(1000, [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)])
    assert (idx[0] == 0).float().mean() > 0.99 and (idx[1] == 1).float().mean() > 0.99
    again = per.sample(1000, [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)])
    assert torch.equal(idx, again)


def test_state_dict_round_trip():
    per = _filled([1.0, 2.0, 3.0], capacity=5)
    other = PrioritySampler(5)
    other.load_state_dict(per.state_dict())
    assert torch.equal(other.priorities, per.priorities) and other.max_priority.item() == 3.0
    assert other.sizes.tolist() == [3]

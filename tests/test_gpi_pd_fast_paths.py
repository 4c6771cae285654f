"""GPI-PD's fast paths against their plain definitions: sparse dropout (Bernoulli mask statistics, values and
gradients), PER sampling over the filled prefix, and the critics' stride-0 input for one member."""

from __future__ import annotations

import math

import numpy as np
import torch

from prism.agents.gpi_pd.networks import VectorCritics, dropped_positions, seeded_dropout
from prism.agents.gpi_pd.per import PrioritySampler


def test_dropped_positions_are_iid_bernoulli():
    # n i.i.d. Bernoulli(p) draws: the count is Binomial(n, p) and every position is dropped with probability p.
    n, p, draws = 4000, 0.05, 400
    g = torch.Generator().manual_seed(0)
    hits = np.zeros(n)
    counts = []
    for _ in range(draws):
        pos = dropped_positions(n, p, g).numpy()
        assert pos.dtype == np.int64 and (np.diff(pos) > 0).all() and pos.min() >= 0 and pos.max() < n
        hits[pos] += 1
        counts.append(len(pos))
    sd = math.sqrt(n * p * (1 - p))
    assert abs(np.mean(counts) - n * p) < 4 * sd / math.sqrt(draws)
    assert 0.8 < np.std(counts) / sd < 1.2
    # per-position frequency: chi-square over 40 blocks of 100 positions (39 dof; 99.9 % quantile ≈ 72)
    blocks = hits.reshape(40, 100).sum(axis=1)
    expected = 100 * draws * p
    assert ((blocks - expected) ** 2 / expected).sum() < 72
    # the first and the last position are as likely as the others (no edge effect of the gap construction)
    assert abs(hits[:200].mean() - draws * p) < 4 * math.sqrt(draws * p)
    assert abs(hits[-200:].mean() - draws * p) < 4 * math.sqrt(draws * p)


def test_dropped_positions_draws_more_when_the_first_chunk_falls_short():
    # p close to 1: almost every position is dropped, the first chunk of gaps cannot reach n
    pos = dropped_positions(1000, 0.999, torch.Generator().manual_seed(1))
    assert len(pos) > 990 and int(pos.max()) <= 999


def test_seeded_dropout_equals_mask_formula_and_its_gradient():
    h = torch.randn(2, 64, 32, requires_grad=True)
    out = seeded_dropout(h, 0.1, torch.Generator().manual_seed(3))
    mask = (out != 0).float()
    assert 0.8 < mask.mean() < 0.97
    torch.testing.assert_close(out, h * mask / 0.9, rtol=0, atol=0)
    out.backward(torch.ones_like(out))
    torch.testing.assert_close(h.grad, mask / 0.9, rtol=0, atol=0)
    again = seeded_dropout(h.detach(), 0.1, torch.Generator().manual_seed(3))
    other = seeded_dropout(h.detach(), 0.1, torch.Generator().manual_seed(4))
    assert torch.equal(again, out.detach()) and not torch.equal(other, out.detach())


def _reference_sample(priorities: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The O(capacity) definition: inverse CDF over the whole row."""
    cdf = priorities.cumsum(dim=1)
    return torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_max(priorities.shape[1] - 1)


def test_per_sample_over_the_filled_prefix_equals_the_whole_row():
    per = PrioritySampler(1000, members=2)
    per.on_add(0, np.arange(300))
    per.on_add(1, np.arange(120))
    rng = np.random.default_rng(0)
    per.update(
        torch.as_tensor(rng.integers(0, 120, (2, 64))), torch.as_tensor(rng.uniform(0.1, 3.0, (2, 64)))
    )
    gens = [torch.Generator().manual_seed(5), torch.Generator().manual_seed(6)]
    ref_gens = [torch.Generator().manual_seed(5), torch.Generator().manual_seed(6)]
    index = per.sample(256, gens)
    u = torch.stack([torch.rand(256, generator=g, dtype=torch.float64) for g in ref_gens])
    assert torch.equal(index, _reference_sample(per.priorities, u))
    assert int(index[1].max()) < 120


def test_one_member_critics_read_a_stride_0_input_with_the_same_values_and_gradients():
    torch.manual_seed(0)
    critics = VectorCritics(7, 3, (16, 16), n=2, dropout=0.0)
    x = torch.randn(5, 7, requires_grad=True)
    q = critics(x)
    ref = critics.net(x.unsqueeze(0).expand(2, 5, 7).contiguous())
    assert torch.equal(q, ref)
    (grad,) = torch.autograd.grad(q.sum(), x)
    (ref_grad,) = torch.autograd.grad(ref.sum(), x)
    torch.testing.assert_close(grad, ref_grad, rtol=0, atol=0)

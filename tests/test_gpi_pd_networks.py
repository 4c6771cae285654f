"""GPI-PD networks: the stacked LayerNorm/dropout critic equals a plain per-slice torch computation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from prism.agents.gpi_pd.networks import DeterministicActor, VectorCritics
from prism.agents.networks import GaussianActor


def _reference_critic(critics: VectorCritics, x: torch.Tensor, slice_: int) -> torch.Tensor:
    """One slice as nn.Linear/LayerNorm/ReLU would compute it (eval mode: no dropout)."""
    body = critics.net.body
    h = x
    n_layers = len(body.weights)
    for j in range(n_layers):
        h = F.linear(h, body.weights[j][slice_].T, body.biases[j][slice_, 0])
        if j < n_layers - 1:
            ln = critics.net
            h = F.layer_norm(h, (h.shape[-1],), ln.norm_scale[j][slice_, 0], ln.norm_shift[j][slice_, 0])
            h = F.relu(h)
    return h


def test_critic_matches_per_slice_reference_in_eval_mode():
    torch.manual_seed(0)
    gens = [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)]
    critics = VectorCritics(7, 3, (16, 16), n=2, members=2, generators=gens)
    with torch.no_grad():  # make LayerNorm's affine parameters non-trivial so they are exercised
        for p in list(critics.net.norm_scale) + list(critics.net.norm_shift):
            p.normal_()
    critics.eval()
    x = torch.randn(2, 5, 7)
    q = critics(x)
    assert q.shape == (2, 2, 5, 3)
    for s in range(2):
        for k in range(2):
            torch.testing.assert_close(q[s, k], _reference_critic(critics, x[s], s * 2 + k))


def test_dropout_is_seeded_scaled_and_off_in_eval():
    critics = VectorCritics(4, 2, (64,), n=2, dropout=0.5)
    x = torch.randn(3, 4)
    a = critics(x, generator=torch.Generator().manual_seed(0))
    b = critics(x, generator=torch.Generator().manual_seed(0))
    c = critics(x, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, c)
    critics.eval()
    torch.testing.assert_close(critics(x), critics(x, generator=torch.Generator().manual_seed(5)))


def test_member_slice_equals_solo_actor_with_same_seed():
    pop = DeterministicActor(
        3, 2, 2, (8, 8), members=2, generators=[torch.Generator().manual_seed(s) for s in (4, 9)]
    )
    solo = DeterministicActor(3, 2, 2, (8, 8), members=1, generators=[torch.Generator().manual_seed(9)])
    obs, w = torch.randn(5, 3), torch.rand(5, 2)
    torch.testing.assert_close(pop(obs, w, member=1), solo(obs, w))
    torch.testing.assert_close(pop(torch.stack([obs, obs]), torch.stack([w, w]))[1], solo(obs, w))


def test_both_actors_refuse_a_flat_batch_of_a_population_without_member():
    """The shared per-member MLP (StackedPolicyNet) names the actor whose call lacks ``member=``."""
    obs, w = torch.randn(5, 3), torch.rand(5, 2)
    for actor_class in (DeterministicActor, GaussianActor):
        actor = actor_class(3, 2, 2, (8,), members=2)
        with pytest.raises(ValueError, match=rf"^{actor_class.__name__}: \[B, d\] input needs member= .* 2$"):
            actor(obs, w)

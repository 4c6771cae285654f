"""ReSymNet's forward pinned to its definition (docs/method.md §4) in both forward paths (issue #23).

The definition of one ensemble member (hidden width H)::

    h  = ReLU(LN(Linear(in→H)(x)))
    h  = ReLU(h + LN(Linear(H→H)(Dropout(ReLU(LN(Linear(H→H)(h)))))))   # residual block 1
    h  = ReLU(h + LN(Linear(H→H)(Dropout(ReLU(LN(Linear(H→H)(h)))))))   # residual block 2
    r̂ = Linear(H→1)(h)

and the "w/o residual" ablation (``reward.residual: false``, ``conf/ablation/wo_residual.yaml``) is
``Linear → LN → ReLU → Linear(→1)``. :class:`ReSymNetEnsemble` computes it twice: the batched ``forward``
(prediction, the padded training layout) and the per-member ``forward_members`` (the ragged training layout
on a CPU). Comparing the two paths with each other cannot see a skip connection lost in both, so each is
compared here with a float64 reference written out from the definition above (its own matmuls and its own
LayerNorm), on weights drawn so that every term of the definition shows in the output.
"""

from __future__ import annotations

from pathlib import Path

import torch
from toy_runs import toy_run

from prism.config import load_config
from prism.reward.models.resymnet import ReSymNetEnsemble
from prism.run.fit import build_run

CONF = Path(__file__).resolve().parents[1] / "conf"
K, IN, H, N = 2, 5, 16, 9  # members, input width, hidden width, steps per member
EPS = 1e-5  # LayerNorm's ε (torch's default, the one ReSymNet uses)
TOL = dict(rtol=1e-5, atol=1e-5)  # float32 network against the float64 reference


def _net(residual: bool = True, dropout: float = 0.3) -> ReSymNetEnsemble:
    """A small ensemble whose every parameter is live: LayerNorm gains away from 1, biases away from 0 and an
    output layer of ordinary scale (at initialisation the biases are 0, the gains 1 and the output layer's
    gain 0.01, which would make a missing term hard to see)."""
    net = ReSymNetEnsemble(K, IN, hidden=H, dropout=dropout, residual=residual, member_seeds=[3, 4])
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif ".ln" in name or name.startswith("ln"):  # LayerNorm gains
                p.copy_(1.0 + 0.5 * torch.randn(p.shape, generator=g))
            else:  # linear maps [K, in, out]
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    return net


def _linear(v: torch.Tensor, layer, k: int) -> torch.Tensor:
    return v @ layer.weight[k].double() + layer.bias[k].double()


def _layer_norm(v: torch.Tensor, norm, k: int) -> torch.Tensor:
    """LN over the last dim: (v − mean) / sqrt(population variance + ε) · gain + bias."""
    mean = v.mean(dim=-1, keepdim=True)
    variance = (v - mean).square().mean(dim=-1, keepdim=True)
    return (v - mean) / torch.sqrt(variance + EPS) * norm.weight[k].double() + norm.bias[k].double()


def _stem(net: ReSymNetEnsemble, k: int, x: torch.Tensor) -> torch.Tensor:
    """``ReLU(LN(Linear(in→H)(x)))`` of member k."""
    return torch.relu(_layer_norm(_linear(x.double(), net.inp, k), net.ln_in, k))


def _residual_block(block, k: int, h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``ReLU(h + LN(Linear(Dropout(ReLU(LN(Linear(h)))))))`` with the dropout as an explicit mask."""
    z = torch.relu(_layer_norm(_linear(h, block["fc1"], k), block["ln1"], k))
    if mask is not None:
        z = z * mask.double()
    return torch.relu(h + _layer_norm(_linear(z, block["fc2"], k), block["ln2"], k))


def _head(net: ReSymNetEnsemble, k: int, h: torch.Tensor) -> torch.Tensor:
    return _linear(h, net.out, k).squeeze(-1)


def _reference(net: ReSymNetEnsemble, x: torch.Tensor, masks=None) -> torch.Tensor:
    """``[K, N]`` per the definition: stem, residual blocks 1 and 2, head (``masks[b][k]``: block b's dropout)."""
    assert len(net.blocks) == 2
    rows = []
    for k in range(K):
        h = _stem(net, k, x[k])
        h = _residual_block(net.blocks[0], k, h, None if masks is None else masks[0][k])
        h = _residual_block(net.blocks[1], k, h, None if masks is None else masks[1][k])
        rows.append(_head(net, k, h))
    return torch.stack(rows)


def _stem_reference(net: ReSymNetEnsemble, x: torch.Tensor) -> torch.Tensor:
    """``[K, N]`` of ``out(ReLU(LN(inp(x))))``: the definition with every block the identity (and the w/o
    residual ablation)."""
    return torch.stack([_head(net, k, _stem(net, k, x[k])) for k in range(K)])


def _batched(net: ReSymNetEnsemble, x: torch.Tensor, dropout: bool = False) -> torch.Tensor:
    return net(x, dropout=dropout).double()


def _per_member(net: ReSymNetEnsemble, x: torch.Tensor, noise=None) -> torch.Tensor:
    return torch.stack(net.forward_members(list(x), list(range(K)), noise)).double()


def _inputs(seed: int = 0) -> torch.Tensor:
    return torch.randn(K, N, IN, generator=torch.Generator().manual_seed(seed))


def test_both_forward_paths_follow_the_definition():
    """Without dropout, the batched forward (per-member and shared inputs) and the per-member path equal the
    definition; the residual blocks change the output by much more than the tolerance (so a lost skip term,
    or a lost block, cannot pass)."""
    net, x = _net(), _inputs()
    with torch.no_grad():
        expected = _reference(net, x)
        torch.testing.assert_close(_batched(net, x), expected, **TOL)
        torch.testing.assert_close(_per_member(net, x), expected, **TOL)
        shared = x[0]
        torch.testing.assert_close(_batched(net, shared), _reference(net, shared.expand(K, N, IN)), **TOL)
    assert (expected - _stem_reference(net, x)).abs().max() > 0.1


def test_both_forward_paths_follow_the_definition_with_dropout():
    """In training mode the dropout sits between ``ReLU(LN(fc1(h)))`` and ``fc2`` of each block: with the masks
    :meth:`ReSymNetEnsemble.dropout_noise` draws (the ones the batched forward draws from the same generator
    state), both paths equal the definition with those masks applied there."""
    net, x = _net(), _inputs(1)
    net.train()
    noise = net.dropout_noise([N] * K, list(range(K)), generator=torch.Generator().manual_seed(5))
    assert noise is not None and len(noise) == 2
    with torch.no_grad():
        expected = _reference(net, x, masks=noise)
        torch.testing.assert_close(_per_member(net, x, noise), expected, **TOL)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(5)
            torch.testing.assert_close(_batched(net, x, dropout=True), expected, **TOL)
    assert (expected - _reference(net, x)).abs().max() > 0.1  # the masks matter


def test_zeroed_block_output_norms_make_every_block_the_identity():
    """With each block's last LayerNorm zeroed (gain and bias), a block adds nothing to its input:
    ``h = ReLU(h + 0) = h`` for ``h ≥ 0``, so the whole network is ``out(ReLU(LN(inp(x))))``, in both paths,
    with or without dropout. Without the skip connection a zeroed block would output ``ReLU(0) = 0`` instead."""
    net, x = _net(), _inputs(2)
    with torch.no_grad():
        for block in net.blocks:
            block["ln2"].weight.zero_()
            block["ln2"].bias.zero_()
        expected = _stem_reference(net, x)
        torch.testing.assert_close(_batched(net, x), expected, **TOL)
        torch.testing.assert_close(_per_member(net, x), expected, **TOL)
        net.train()  # whatever dropout does inside a block, a zeroed block stays the identity
        noise = net.dropout_noise([N] * K, list(range(K)), generator=torch.Generator().manual_seed(6))
        torch.testing.assert_close(_per_member(net, x, noise), expected, **TOL)
        torch.testing.assert_close(_batched(net, x, dropout=True), expected, **TOL)
    # the stem's output is not what a zeroed hidden state gives (the head's bias alone)
    head_bias = net.out.bias.detach().double().reshape(K, 1)
    assert (expected - head_bias).abs().min() > 1e-3


def test_without_residual_differs_from_residual_by_exactly_the_blocks():
    """``residual=False`` is ``Linear → LN → ReLU → Linear``: no other parameters, and with the stem and head of
    a residual network it equals that network with its blocks made the identity. With live blocks the two
    differ by exactly the blocks' contribution through the (linear) head, ``(h₂ − h₀) · W_out``, written out
    from the definition."""
    residual, plain = _net(residual=True), _net(residual=False)
    assert len(plain.blocks) == 0
    names = {name for name, _ in plain.named_parameters()}
    assert names == {f"{layer}.{p}" for layer in ("inp", "ln_in", "out") for p in ("weight", "bias")}
    with torch.no_grad():
        for name, p in plain.named_parameters():
            p.copy_(residual.get_parameter(name))
    x = _inputs(3)
    with torch.no_grad():
        stem = _stem_reference(residual, x)
        for path in (_batched, _per_member):
            torch.testing.assert_close(path(plain, x), stem, **TOL)
        plain.train()  # no blocks, so no dropout either
        torch.testing.assert_close(_batched(plain, x, dropout=True), stem, **TOL)
        assert plain.dropout_noise([N] * K, list(range(K))) == []

        skip_terms = []
        for k in range(K):
            h0 = _stem(residual, k, x[k])
            h2 = _residual_block(
                residual.blocks[1], k, _residual_block(residual.blocks[0], k, h0, None), None
            )
            skip_terms.append(((h2 - h0) @ residual.out.weight[k].double()).squeeze(-1))
        difference = torch.stack(skip_terms)
        for path in (_batched, _per_member):
            torch.testing.assert_close(path(residual, x) - path(plain, x), difference, **TOL)
        assert difference.abs().max() > 0.1

        for block in residual.blocks:
            block["ln2"].weight.zero_()
            block["ln2"].bias.zero_()
        for path in (_batched, _per_member):
            torch.testing.assert_close(path(residual, x), path(plain, x), **TOL)


def test_wo_residual_overlay_builds_and_installs_the_network_without_blocks(tmp_path):
    """Through the config and factory path a run uses (``load_config`` → ``build_run`` → the loop's first
    collection and fit): the ``wo_residual`` overlay's fitted model has no residual blocks, is the model the
    agent's shaper predicts with, and predicts ``mean_k out_k(ReLU(LN_k(inp_k(standardised h))))``; the same
    path without the overlay fits two blocks."""
    for files, blocks in ((("ablation/wo_residual.yaml",), 0), ((), 2)):
        config = load_config(
            [CONF / "quickstart.yaml", *(CONF / f for f in files)],
            [*toy_run({"reward.max_epochs": 1}), f"run_dir={tmp_path / str(blocks)}"],
        )
        assert config.reward.residual is (blocks == 2)
        run = build_run(config, progress_bar=False)
        run.loop._advance(run.agent, None)  # collect the random episodes, fit, stop where RL begins
        (model,) = run.loop.models
        assert run.agent.shapers[0].model is model  # what RL's rewards come from
        assert model.net.residual is (blocks == 2) and len(model.net.blocks) == blocks
        assert any("blocks" in key for key in model.state_dict()) is (blocks == 2)
        if blocks:
            continue
        k = model.n_members
        features = run.loop.stores[0].features[:50, : model.in_features]
        z = ((features - model.feature_mean) / model.feature_scale).double()
        net = model.net
        by_hand = torch.stack([_head(net, m, _stem(net, m, z)) for m in range(k)]).mean(0)
        torch.testing.assert_close(model.predict(features).double(), by_hand, **TOL)

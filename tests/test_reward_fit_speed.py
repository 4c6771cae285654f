"""The fast ReSymNet fit (issue H7): the ragged layout fits the same weights as the padded reference, its
dropout draws and kernels match, ``reward.threads`` and the run's device reach the fit, and ``device=cuda``
without CUDA is a one-line config error."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from segment_stores import set_dtype, synthetic_store

from prism.config import ConfigError, load_config
from prism.core.stacked_linear import onednn_linear_available
from prism.data.datamodule import MemberBatch, TrajectorySumDataModule, member_shuffle_seeds
from prism.data.segments import SegmentStore
from prism.reward.config import ReSymNetConfig
from prism.reward.fitting.fit import ensemble_seeds as member_seeds
from prism.reward.fitting.trajectory_sum_module import TrajectorySumModule
from prism.reward.models.resymnet import DropoutNoiseStream, ReSymNetEnsemble
from prism.reward.models.resymnet_fit import fit_resymnet_model, resymnet_recipe

CONF = Path(__file__).resolve().parents[1] / "conf"


def _fit_module(
    store: SegmentStore, cfg: ReSymNetConfig, *, ragged: bool, dtype: torch.dtype
) -> TrajectorySumModule:
    """A fit through Lightning as fit_resymnet_model runs it, in ``dtype`` (float64: rounding cannot grow into a
    visible difference over the epochs, so the two layouts must agree to many digits)."""
    k = cfg.ensemble_size
    dm = TrajectorySumDataModule(
        store,
        batch_size=cfg.batch_size,
        seed=0,
        n_members=k,
        shuffle_seeds=member_shuffle_seeds(0, k),
        ragged=ragged,
    )
    dm.setup()
    set_dtype(dm, dtype)
    torch.manual_seed(0)
    module = TrajectorySumModule(resymnet_recipe(cfg), dm.in_features, cfg, member_seeds(0, k)).to(dtype)
    L.Trainer(
        max_epochs=cfg.max_epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
    ).fit(module, datamodule=dm)  # fmt: skip
    return module


def test_ragged_fit_equals_padded_fit_with_early_stopped_members_skipped():
    store = synthetic_store(60)
    cfg = ReSymNetConfig(hidden=16, dropout=0.3, ensemble_size=3, batch_size=8, max_epochs=25, patience=2)
    padded = _fit_module(store, cfg, ragged=False, dtype=torch.float64)
    ragged = _fit_module(store, cfg, ragged=True, dtype=torch.float64)
    # The fit really stopped members at different epochs, so the ragged fit left some out for a while.
    assert len(set(ragged.epochs_run.tolist())) > 1
    assert ragged.epochs_run.tolist() == padded.epochs_run.tolist()
    assert ragged.best_epoch.tolist() == padded.best_epoch.tolist()
    torch.testing.assert_close(ragged.best_val_loss, padded.best_val_loss, rtol=1e-10, atol=1e-12)
    for (name, p), (_, q) in zip(ragged.net.named_parameters(), padded.net.named_parameters()):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-11, msg=name)


def test_forward_members_draws_the_padded_forwards_dropout():
    torch.manual_seed(0)
    net = ReSymNetEnsemble(3, 5, hidden=32, dropout=0.3, member_seeds=[1, 2, 3]).train()
    steps = (7, 19, 12)
    xs = [torch.randn(n, 5) for n in steps]
    padded = torch.zeros(3, max(steps), 5)
    for k, x in enumerate(xs):
        padded[k, : x.shape[0]] = x
    torch.manual_seed(42)
    reference = net(padded)  # F.dropout on [3, 19, 32], global generator
    for members in ([0, 1, 2], [0, 2]):  # member 1 left out: the others keep their masks
        torch.manual_seed(42)
        noise = net.dropout_noise(steps, members)
        preds = net.forward_members([xs[k] for k in members], members, noise)
        for pred, k in zip(preds, members):
            torch.testing.assert_close(pred, reference[k, : steps[k]], rtol=1e-5, atol=1e-6)
    # A different draw gives different predictions: the match above is not dropout being inert.
    torch.manual_seed(43)
    other = net.forward_members(xs, [0, 1, 2], net.dropout_noise(steps, [0, 1, 2]))
    assert not torch.allclose(other[1], reference[1, : steps[1]])


def test_noise_stream_drawn_ahead_equals_inline_draws():
    net = ReSymNetEnsemble(2, 4, hidden=8, dropout=0.3, member_seeds=[0, 1]).train()
    state = torch.Generator().manual_seed(7).get_state()
    stream = DropoutNoiseStream(net, state)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the next batch is drawn on the worker
    try:
        first = stream.take((5, 9), [0, 1], next_steps=(6, 3))
        assert stream._pending is not None
        second = stream.take((6, 3), [0, 1])
        with pytest.raises(RuntimeError, match="asked for"):
            stream.take((2, 2), [0, 1], next_steps=(4, 4))
            stream.take((1, 1), [0, 1])  # not the batch drawn ahead
    finally:
        stream.close()
        torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(7)
    for got, steps in ((first, (5, 9)), (second, (6, 3))):
        expected = net.dropout_noise(steps, [0, 1], generator=g)
        for block_got, block_expected in zip(got, expected):
            for a, b in zip(block_got, block_expected):
                assert torch.equal(a, b)


@pytest.mark.skipif(not onednn_linear_available(), reason="no oneDNN linear kernel in this torch build")
def test_onednn_member_linear_matches_float64_reference():
    g = torch.Generator().manual_seed(0)
    net = ReSymNetEnsemble(2, 6, hidden=64, dropout=0.0, member_seeds=[3, 4])
    x = torch.randn(300, 64, generator=g)
    grad_out = torch.randn(300, 64, generator=g)
    layer = net.blocks[0]["fc1"]
    w64 = layer.weight.detach()[1].double().requires_grad_()
    b64 = layer.bias.detach()[1].double().requires_grad_()
    x64 = x.double().requires_grad_()
    ref = torch.addmm(b64, x64, w64)
    ref.backward(grad_out.double())
    xf = x.clone().requires_grad_()
    out = layer.member(1, xf)
    out.backward(grad_out)
    assert out.grad_fn is not None and "OneDNN" in type(out.grad_fn).__name__
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(xf.grad.double(), x64.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(layer.weight.grad[1].double(), w64.grad, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(layer.bias.grad[1].double(), b64.grad, rtol=1e-4, atol=1e-3)
    assert float(layer.weight.grad[0].abs().sum()) == 0.0  # the other member's slice is untouched


def test_fit_reward_model_layouts_agree_and_threads_are_applied(monkeypatch):
    store = synthetic_store(40, seed=1)
    cfg = ReSymNetConfig(hidden=32, ensemble_size=2, batch_size=8, max_epochs=2, patience=5, threads=2)
    seen: list[int] = []
    original = TrajectorySumModule.on_train_epoch_start

    def record(self):
        seen.append(torch.get_num_threads())
        original(self)

    monkeypatch.setattr(TrajectorySumModule, "on_train_epoch_start", record)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ragged, ragged_summary = fit_resymnet_model(store, cfg, seed=0)  # auto = ragged on a CPU
        assert torch.get_num_threads() == 1  # the caller's count is restored
        padded, _ = fit_resymnet_model(store, cfg, seed=0, layout="padded")
    finally:
        torch.set_num_threads(threads)
    assert seen == [2, 2, 2, 2]
    for name, p in ragged.state_dict().items():
        torch.testing.assert_close(p, padded.state_dict()[name], rtol=1e-3, atol=1e-4, msg=name)
    assert ragged_summary.seconds_per_epoch > 0
    with pytest.raises(ValueError, match="layout"):
        fit_resymnet_model(store, cfg, seed=0, layout="bucketed")


def test_ragged_batches_hold_the_padded_batches_steps():
    store = synthetic_store(30, seed=2)
    padded = TrajectorySumDataModule(store, batch_size=4, seed=0, n_members=3)
    ragged = TrajectorySumDataModule(store, batch_size=4, seed=0, n_members=3, ragged=True)
    padded.setup()
    ragged.setup()
    batches = list(ragged.train_dataloader())
    for i, (p, r) in enumerate(zip(padded.train_dataloader(), batches)):
        assert isinstance(r, MemberBatch)
        assert torch.equal(p.targets, r.targets)
        assert max(r.steps) == p.features.shape[1]
        assert r.next_steps == (batches[i + 1].steps if i + 1 < len(batches) else None)
        for k in range(3):
            n = r.steps[k]
            assert torch.equal(r.features[k], p.features[k, :n])
            assert torch.equal(r.segment_ids[k], p.segment_ids[k, :n])
            assert bool((p.segment_ids[k, n:] == p.targets.shape[-1]).all())  # the rest is padding


def test_loop_fits_on_the_agents_device(monkeypatch):
    from prism.envs import get_env_spec
    from prism.loop import phases

    calls = []

    def fake_fit(store, config, **kwargs):
        calls.append(kwargs)
        return SimpleNamespace()

    from prism.plugins.registry import REWARD_MODELS

    settings = phases.LoopSettings(
        cycles=1, steps_per_cycle=10, initial_episodes=1, expert_episodes=0, sparse_channel=0, p_rel=0.0,
        reward=ReSymNetConfig(), needs_model=True, seed=0, reward_model="fake_fit",
    )  # fmt: skip
    # The loop fits the reward model its settings name, looked up in the registry.
    REWARD_MODELS.register("fake_fit", fit=fake_fit, load=dict)
    loop = phases.PrismLoopCallback(get_env_spec("mo-hopper-v5"), settings)
    loop.stores = [synthetic_store(10)]
    agent = SimpleNamespace(
        device=torch.device("meta"), shapers=[SimpleNamespace(model=None)], env_step_count=0, env_steps=0,
        drop_captured_graphs=lambda: None,
    )  # fmt: skip
    try:
        loop._fit(agent, None)
    finally:
        REWARD_MODELS.unregister("fake_fit")
    assert calls and calls[0]["device"] == torch.device("meta")


def test_device_cuda_without_cuda_is_a_one_line_config_error(monkeypatch, capsys):
    from prism.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", "cuda:1"):
        with pytest.raises(ConfigError) as info:
            load_config([CONF / "hopper.yaml"], [f"device={device}"])
        message = str(info.value)
        assert message.startswith("device:") and "\n" not in message and "CUDA" in message
    assert main(["fit", "--config", str(CONF / "hopper.yaml"), "device=cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("prism: error: device:") and "\n" not in err
    with pytest.raises(ConfigError, match="^reward.threads"):
        load_config([CONF / "hopper.yaml"], ["reward.threads=-1"])


def test_device_cuda_n_must_be_one_of_this_machines_devices(monkeypatch):
    """cuda:0 .. cuda:<count - 1> are this machine's GPUs; cuda:<count> and beyond are refused in one line."""
    from prism.core.devices import check_cuda_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    for device in ("cuda", "cuda:0", "cuda:1"):
        check_cuda_device(device)
    for device in ("cuda:2", "cuda:7", "cuda:x"):
        with pytest.raises(
            ConfigError, match=r"^device: .* is not one of this machine's 2 CUDA device\(s\)$"
        ):
            check_cuda_device(device)

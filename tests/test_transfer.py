"""One host-to-device copy in and one device-to-host copy out per env step, no host read of a device value
(prism/agents/transfer.py); the packed copy holds exactly the arrays it was given."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from prism.agents import transfer
from prism.agents.capql import CAPQLModule
from prism.agents.config import CAPQLConfig
from prism.envs import make_env
from prism.envs.registry import TOY_SPEC


def test_pack_unpack_round_trip_keeps_values_dtypes_and_alignment():
    rng = np.random.default_rng(0)
    arrays = [
        np.array([5, 1 << 40, -3], dtype=np.int64),
        rng.normal(size=(3, 7)).astype(np.float32),  # 84 bytes: the next array must start 8-aligned
        rng.normal(size=(2, 1, 5)).astype(np.float32),
        np.empty((0, 4), dtype=np.float32),
        np.arange(3, dtype=np.int64),
    ]
    buffer, layout = transfer.pack(arrays)
    assert buffer.nbytes == transfer.packed_size(arrays) == 24 + 88 + 40 + 0 + 24
    assert all(start % 8 == 0 for start, *_ in layout)
    out = transfer.unpack(torch.from_numpy(buffer), layout)
    for a, t in zip(arrays, out):
        assert t.dtype == {np.float32: torch.float32, np.int64: torch.int64}[a.dtype.type]
        assert t.shape == a.shape and np.array_equal(t.numpy(), a)
    with pytest.raises(TypeError):
        transfer.pack([np.zeros(2)])  # float64 is not a transfer dtype


def test_env_steps_copy_once_each_way_and_never_read_the_device(monkeypatch):
    config = CAPQLConfig(actor_hidden=[16], critic_hidden=[16], batch_size=4, buffer_size=200,
                         learning_starts=5, log_every=10_000)  # fmt: skip
    agent = CAPQLModule(config, TOY_SPEC, lambda member: make_env(TOY_SPEC), seeds=(1, 2, 3))
    agent.setup("fit")
    agent.on_fit_start()
    agent._raw_optimizers = list(agent.configure_optimizers())
    agent._polyak = (list(agent.critic_target.parameters()), list(agent.critic.parameters()))

    counts = {"to_device": 0, "cpu": 0, "as_tensor": 0, "reads": 0}
    real_to_device, real_cpu, real_as_tensor = transfer.to_device, torch.Tensor.cpu, torch.as_tensor

    def counting(name, fn):
        def wrapped(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)

        return wrapped

    def read(*args, **kwargs):
        counts["reads"] += 1
        raise AssertionError("a device value was read on the host")

    monkeypatch.setattr(transfer, "to_device", counting("to_device", real_to_device))
    monkeypatch.setattr(torch.Tensor, "cpu", counting("cpu", real_cpu))
    monkeypatch.setattr(torch, "as_tensor", counting("as_tensor", real_as_tensor))
    for name in ("item", "tolist", "__bool__", "__float__", "__int__"):
        monkeypatch.setattr(torch.Tensor, name, read)

    steps = 30
    for _ in range(steps):
        agent.env_step()
        if agent.env_step_count >= agent.learning_starts and len(agent.buffer) >= agent.batch_size:
            agent._update_and_accumulate()
        # The next step's policy input is the tensor that came with this step's copy.
        assert agent._obs_dev[0] is agent._obs
    assert counts["reads"] == 0
    assert counts["to_device"] == steps  # rows, slots and next observations: one copy in per step
    # One copy out per step that acts (after learning_starts), plus the first block of 1024 preferences.
    assert counts["cpu"] == steps - config.learning_starts + 1
    # Never a separate observation copy: the first step that acts (after learning_starts) reads the
    # observations that came with the step before it.
    assert counts["as_tensor"] == 0
    assert agent.n_updates > 0

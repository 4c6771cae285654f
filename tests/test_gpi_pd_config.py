"""GPIPDConfig: morl-baselines' GPIPDContinuousAction defaults, and one-line ``agent.<field>`` errors."""

from __future__ import annotations

import inspect

import pytest

from prism.agents.gpi_pd.config import GPIPDConfig


def test_defaults_match_morl_baselines_signature():
    mb = pytest.importorskip("morl_baselines.multi_policy.gpi_pd.gpi_pd_continuous_action")
    ref = {k: p.default for k, p in inspect.signature(mb.GPIPDContinuousAction.__init__).parameters.items()}
    c = GPIPDConfig()
    pairs = {
        "learning_rate": c.lr,
        "gamma": c.gamma,
        "tau": c.tau,
        "buffer_size": c.buffer_size,
        "net_arch": c.net_arch,
        "batch_size": c.batch_size,
        "num_q_nets": c.n_critics,
        "delay_policy_update": c.policy_delay,
        "learning_starts": c.learning_starts,
        "gradient_updates": c.gradient_updates,
        "policy_noise": c.policy_noise,
        "noise_clip": c.noise_clip,
        "per": c.per,
        "min_priority": c.per_min_priority,
        "alpha": c.per_alpha,
        "dyna": c.dyna,
        "dynamics_net_arch": c.dynamics_net_arch,
        "dynamics_train_freq": c.dynamics_train_freq,
        "dynamics_rollout_len": c.dynamics_rollout_len,
        "dynamics_rollout_starts": c.dynamics_rollout_starts,
        "dynamics_rollout_freq": c.dynamics_rollout_freq,
        "dynamics_rollout_batch_size": c.dynamics_rollout_batch_size,
        "dynamics_buffer_size": c.dynamics_buffer_size,
        "dynamics_min_uncertainty": c.dynamics_min_uncertainty,
        "dynamics_real_ratio": c.dynamics_real_ratio,
    }
    assert {k: ref[k] for k in pairs} == pairs


def test_every_field_has_a_docstring():
    # GPI-PD's own fields and those it inherits from OffPolicyConfig, each documented where it is declared
    for cls in GPIPDConfig.__mro__:
        if cls is object or not hasattr(cls, "__dataclass_fields__"):
            continue
        source = inspect.getsource(cls)
        for name in cls.__annotations__:
            if name not in GPIPDConfig.__dataclass_fields__:
                continue  # a ClassVar
            after = source.split(f"\n    {name}:", 1)[1].split("\n", 2)[1]
            assert after.strip().startswith('"""'), f"{cls.__name__}.{name}"


@pytest.mark.parametrize(
    "field, value",
    [
        ("lr", 0.0),
        ("gamma", 1.5),
        ("tau", 0.0),
        ("critic_dropout", 1.0),
        ("policy_delay", 0),
        ("gradient_updates", 0),
        ("per_min_priority", 0.0),
        ("dynamics_real_ratio", 1.5),
        ("symreg_lambda", -1.0),
        ("net_arch", []),
    ],
)
def test_bad_value_names_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^agent\.{field}: "):
        GPIPDConfig(**{field: value})

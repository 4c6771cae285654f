"""The static-buffer CAPQL update (prism/agents/static_update.py) is today's eager update, bit for bit.

The reference is written here from the pre-change semantics, independently of the agent's update path: replay
indices ``torch.randint(size_s) + s·capacity`` from member s's replay stream, ``storage[index]``, the pure
losses of ``prism.agents.losses``, a plain fused ``torch.optim.Adam`` per network (the optimiser prism has
always built) and a per-tensor Polyak ``lerp_``. Any change of draw, order, optimiser or arithmetic fails it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tool_modules import load_tool

from prism.agents.capql import TRAIN_KEYS, CAPQLModule
from prism.agents.config import CAPQLConfig
from prism.agents.losses import capql_actor_loss, capql_critic_loss
from prism.core.seeding import derive_seed, population_seed
from prism.data.replay import ReplayBatch

SMALL = dict(actor_hidden=[32, 32], critic_hidden=[32, 32], batch_size=16, buffer_size=300, learning_starts=0)


gc = load_tool("graph_check")


def make_agent(seeds, **overrides) -> CAPQLModule:
    """An agent ready to update without a Trainer: buffer, generators and raw optimisers in place."""
    return gc.make_agent(seeds, "cpu", False, **{**SMALL, **overrides})


def add_random_rows(agent: CAPQLModule, generator: np.random.Generator, n: int) -> None:
    """``n`` transitions per member (done ~ 20 %, weights on the simplex), the same for every call order."""
    gc.fill(agent, n, generator, done_prob=0.2)


class Reference:
    """Today's eager update, written out: its own copies of the nets, generators and optimisers."""

    def __init__(self, agent: CAPQLModule):
        seeds, device = agent.seeds, agent.device
        self.actor, self.critic, self.target = agent.actor, agent.critic, agent.critic_target
        self.replay = [torch.Generator(device=device).manual_seed(derive_seed(s, "replay")) for s in seeds]
        self.noise = torch.Generator(device=device).manual_seed(population_seed(seeds, "update"))
        self.actor_opt = torch.optim.Adam(list(self.actor.parameters()), lr=agent.config.lr, fused=True)
        self.critic_opt = torch.optim.Adam(list(self.critic.parameters()), lr=agent.config.lr, fused=True)
        self.agent = agent

    def sample(self) -> ReplayBatch:
        buffer = self.agent.buffer
        index = torch.stack(
            [
                torch.randint(
                    int(buffer.sizes[s]), (self.agent.batch_size,), generator=g, device=buffer.device
                )
                + s * buffer.capacity
                for s, g in enumerate(self.replay)
            ]
        )
        rows = buffer.storage.view(-1, buffer.width)[index]
        return buffer._split(rows)

    def update(self) -> torch.Tensor:
        hyper = self.agent.hyper
        batch = self.sample()
        critic = capql_critic_loss(
            self.actor, self.critic, self.target, batch, hyper.gamma, hyper.alpha, self.noise
        )
        self.critic_opt.zero_grad()
        critic.loss.backward()
        self.critic_opt.step()
        actor = capql_actor_loss(
            self.actor, self.critic, batch, hyper.alpha, hyper.symreg_lambda,
            self.agent.obs_sign, self.agent.act_sign, self.noise,
        )  # fmt: skip
        self.actor_opt.zero_grad()
        actor.loss.backward()
        self.actor_opt.step()
        with torch.no_grad():
            for t, p in zip(self.target.parameters(), self.critic.parameters()):
                t.lerp_(p, hyper.tau)
        return torch.stack(
            [critic.member_loss, actor.policy_loss, actor.symreg, actor.alpha_log_pi, critic.q_mean], dim=-1
        )


def optimiser_state(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    out = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state[p]
            out += [state["exp_avg"], state["exp_avg_sq"], state["step"].reshape(())]
    return out


def assert_bitwise(a: list[torch.Tensor], b: list[torch.Tensor], what: str) -> None:
    assert len(a) == len(b) > 0
    for i, (x, y) in enumerate(zip(a, b)):
        assert torch.equal(x.cpu(), y.cpu()), f"{what}[{i}] differs (max |Δ| {(x - y).abs().max().item()})"


@pytest.mark.parametrize("seeds", [(4,), (3, 7, 11)], ids=["S1", "S3"])
@pytest.mark.parametrize("mode", ["regularise", "none"])
def test_static_update_equals_eager_update_bit_for_bit(seeds, mode):
    static, eager = make_agent(seeds, symmetry_mode=mode), make_agent(seeds, symmetry_mode=mode)
    initial = [p.detach().clone() for p in static.parameters()]
    reference = Reference(eager)
    rows_static, rows_eager = np.random.default_rng(0), np.random.default_rng(0)
    add_random_rows(static, rows_static, 40)
    add_random_rows(eager, rows_eager, 40)
    for _ in range(24):
        # The rings grow between updates: the draw must follow each member's size.
        add_random_rows(static, rows_static, 1)
        add_random_rows(eager, rows_eager, 1)
        terms = static.update_step().clone()
        expected = reference.update()
        assert terms.shape == (len(seeds), len(TRAIN_KEYS))
        assert torch.equal(terms, expected)
    assert_bitwise(list(static.parameters()), list(eager.parameters()), "parameters")
    assert_bitwise(list(static.critic_target.parameters()), list(eager.critic_target.parameters()), "target")
    for mine, theirs, name in zip(static._raw_optimizers, (reference.actor_opt, reference.critic_opt), "ac"):
        assert_bitwise(optimiser_state(mine), optimiser_state(theirs), f"{name} optimiser state")
    # Not vacuous: the updates moved the weights, and the members' terms differ from each other.
    assert any(not torch.equal(p, q) for p, q in zip(static.parameters(), initial))
    if len(seeds) > 1:
        assert not torch.equal(terms[0], terms[1])


def test_static_draw_is_randint_draw_for_draw():
    """``random_(lo, lo + n)`` into the static index equals ``torch.randint(n) + lo`` (the pre-change draw)."""
    agent = make_agent((0, 1, 2))
    add_random_rows(agent, np.random.default_rng(1), 7)
    agent.buffer.sizes[:] = [7, 3, 1]  # uneven rings (a segment-holding shaper stores later)
    runner = agent.static_update()
    gens = [torch.Generator().manual_seed(s) for s in range(3)]
    again = [torch.Generator().manual_seed(s) for s in range(3)]
    for _ in range(5):
        runner.draw.draw(gens)
        expected = torch.stack(
            [torch.randint(n, (16,), generator=g) + s * 300 for s, (n, g) in enumerate(zip([7, 3, 1], again))]
        )
        assert torch.equal(runner.draw.index, expected)
    batch = runner.draw.gather()
    assert torch.equal(
        batch.obs, agent.buffer._split(agent.buffer.storage.view(-1, agent.buffer.width)[expected]).obs
    )


def test_static_update_rebuilds_when_optimiser_state_is_loaded():
    agent = make_agent((5,))
    add_random_rows(agent, np.random.default_rng(2), 20)
    first = agent.static_update()
    assert agent.static_update() is first  # kept while nothing it points at changes
    agent._raw_optimizers[0].load_state_dict(agent._raw_optimizers[0].state_dict())
    assert agent.static_update() is not first


def test_cuda_graph_auto_is_the_default_and_captures_only_on_cuda():
    """``agent.cuda_graph: auto`` (the default since the H200 check passed): graphs on CUDA, eager on the CPU,
    where the optimisers stay non-capturable; ``false`` keeps CUDA eager; anything else is refused by key."""
    assert CAPQLConfig().cuda_graph == "auto"
    assert [
        CAPQLConfig(cuda_graph=v).graph_on(d) for v in ("auto", True, False) for d in ("cuda", "cpu")
    ] == [
        True,
        False,
        True,
        False,
        False,
        False,
    ]
    assert CAPQLConfig().graph_on(torch.device("cuda", 1)) and not CAPQLConfig().graph_on(torch.device("cpu"))
    with pytest.raises(ValueError, match="^agent.cuda_graph: must be auto, true or false"):
        CAPQLConfig(cuda_graph="maybe")
    agent = gc.make_agent((3,), "cpu", "auto", **SMALL)
    add_random_rows(agent, np.random.default_rng(4), 20)
    assert agent.static_update().use_graph is False
    assert [opt.defaults["capturable"] for opt in agent._raw_optimizers] == [False, False]


def test_update_terms_land_in_the_static_buffer_without_host_reads(monkeypatch):
    """No ``.item()`` / ``.tolist()`` on the update path: the terms stay on the device between log flushes."""
    agent = make_agent((1, 2))
    add_random_rows(agent, np.random.default_rng(3), 20)
    reads = []
    monkeypatch.setattr(torch.Tensor, "item", lambda self: reads.append("item"))
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: reads.append("tolist"))
    out = [agent.update_step() for _ in range(3)]
    assert reads == []
    assert all(t is out[0] for t in out)  # one static buffer, overwritten each update


def test_graph_check_tool_runs_the_same_update_on_cpu_with_the_graph_flag_ignored():
    """tools/graph_check.py (what gpu_check.sh runs on CUDA): on a CPU ``cuda_graph: true`` is ignored, so
    both of its agents run the same eager static update and must agree exactly."""
    assert gc.compare((0, 1), 12, "cpu") == (0.0, 0.0, 0)


def test_graph_check_max_diff_sees_a_difference_in_targets_and_optimiser_state():
    """The tool's comparison is not vacuous: equal agents read 0, a nudged Polyak target or Adam moment not."""
    a, b = make_agent((0, 1)), make_agent((0, 1))
    for agent in (a, b):
        add_random_rows(agent, np.random.default_rng(4), 20)
        agent.update_step()
    assert gc.max_diff(a, b) == 0.0
    with torch.no_grad():
        next(b.critic_target.parameters())[1, 0].add_(0.5)
    assert gc.max_diff(a, b) == pytest.approx(0.5)
    b.critic_target.load_state_dict(a.critic_target.state_dict())
    opt = b._raw_optimizers[1]
    opt.state[opt.param_groups[0]["params"][-1]]["exp_avg_sq"].add_(0.25)
    assert gc.max_diff(a, b) == pytest.approx(0.25)

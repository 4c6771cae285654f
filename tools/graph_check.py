"""Graph replay vs the eager static path: the same CAPQL updates with ``agent.cuda_graph`` on and off.

Two agents with the same seeds get the same replay rows (the rings grow between updates, so the eager draw
follows sizes the captured graph never sees); after every update their logged terms, and at the end their
parameters, Polyak targets and Adam states (moments and step counts) are compared.

    python tools/graph_check.py [--device cuda] [--updates 100] [--seeds 1 8]

The last lines are ``graph_captures: <n>`` (per agent; 1 on CUDA, 0 on a CPU, where both sides run the same
eager static update) and ``graph_vs_eager_max_abs_diff: <x>`` (the worst over every S and every tensor);
``tools/gpu_check.sh`` reads them (goal: ≤ 1e-6 over 100 updates). ``tests/test_cuda.py`` runs it too.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from prism.agents.capql import CAPQLModule
from prism.agents.config import CAPQLConfig
from prism.envs import make_env
from prism.envs.registry import TOY_SPEC

SMALL = dict(
    actor_hidden=[64, 64], critic_hidden=[64, 64], batch_size=64, buffer_size=2000, learning_starts=0
)


def make_agent(seeds, device: str, cuda_graph: bool, **overrides) -> CAPQLModule:
    """An agent ready to update without a Trainer (buffer, generators, raw optimisers in place)."""
    config = CAPQLConfig(**{**SMALL, **overrides, "cuda_graph": cuda_graph})
    agent = CAPQLModule(config, TOY_SPEC, lambda member: make_env(TOY_SPEC), seeds=seeds).to(device)
    agent._ensure_buffer()
    agent._ensure_generators()
    agent._raw_optimizers = list(agent.configure_optimizers())
    agent._polyak = (list(agent.critic_target.parameters()), list(agent.critic.parameters()))
    return agent


def fill(agent: CAPQLModule, rows: int, seed: int | np.random.Generator = 0, done_prob: float = 0.1) -> None:
    """``rows`` random transitions per member (done with probability ``done_prob``, weights on the simplex),
    the same for every agent given the same ``seed`` (a generator is drawn from where it stands)."""
    rng = np.random.default_rng(seed)
    o, a, n_obj = TOY_SPEC.obs_dim, TOY_SPEC.act_dim, TOY_SPEC.n_objectives
    for _ in range(rows):
        batch = []
        for _m in range(agent.members):
            w = rng.random(n_obj)
            row = agent.buffer.row(
                rng.normal(size=o),
                rng.uniform(-1, 1, size=a),
                rng.normal(size=n_obj),
                rng.normal(size=o),
                bool(rng.random() < done_prob),
                w / w.sum(),
            )
            batch.append(row)
        agent.buffer.add_rows(np.arange(agent.members), np.stack(batch))


def max_diff(a: CAPQLModule, b: CAPQLModule) -> float:
    """Largest |Δ| over parameters, targets and Adam states (moments, step counts) of two agents."""
    pairs = list(zip(a.parameters(), b.parameters()))
    pairs += list(zip(a.critic_target.parameters(), b.critic_target.parameters()))
    for opt_a, opt_b in zip(a._raw_optimizers, b._raw_optimizers):
        for p, q in zip(opt_a.param_groups[0]["params"], opt_b.param_groups[0]["params"]):
            pairs += [(opt_a.state[p][k], opt_b.state[q][k]) for k in ("exp_avg", "exp_avg_sq", "step")]
    return max(float((x.detach().float() - y.detach().float()).abs().max()) for x, y in pairs)


def compare(seeds, updates: int, device: str) -> tuple[float, float, int]:
    """``(parameter/state |Δ|, worst term |Δ|, captures)`` after ``updates`` graphed vs eager updates."""
    graphed, eager = make_agent(seeds, device, True), make_agent(seeds, device, False)
    fill(graphed, 300)
    fill(eager, 300)
    worst = 0.0
    for i in range(updates):
        fill(graphed, 1, seed=1000 + i)
        fill(eager, 1, seed=1000 + i)
        t_graph, t_eager = graphed.update_step().clone(), eager.update_step().clone()
        worst = max(worst, float((t_graph - t_eager).abs().max()))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return max_diff(graphed, eager), worst, graphed.static_update().captures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 8], help="population sizes S to check")
    args = parser.parse_args()
    worst, captures = 0.0, []
    for s in args.seeds:
        params, terms, n = compare(tuple(range(s)), args.updates, args.device)
        print(
            f"S={s}: {args.updates} updates, params/state max |diff| {params:.3g}, terms {terms:.3g}, captures {n}"
        )
        worst, captures = max(worst, params, terms), captures + [n]
    print(f"device={args.device} torch={torch.__version__}")
    print(f"graph_captures: {' '.join(map(str, captures))}")
    print(f"graph_vs_eager_max_abs_diff: {worst:.3g}")


if __name__ == "__main__":
    main()

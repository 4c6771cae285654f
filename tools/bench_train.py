"""Training throughput: prism's CAPQLModule vs morl-baselines' CAPQL vs a bare-torch loop (same updates).

All three run in this one process on the same env (mo-hopper-v5 by default) with the same hyperparameters
(docs/method.md §6: [256, 256] nets, batch 128, buffer 1e6, lr 3e-4, γ 0.99, τ 0.005, α 0.2, learning_starts 1000,
one update per env step). Each first takes its ``learning_starts`` random steps untimed; then they alternate
in blocks of env steps (prism block, morl-baselines block, bare block, …) so that load changes on a shared
machine hit all three alike. prism runs inside its Lightning ``Trainer``; a callback runs the other two
sides' blocks between prism's blocks and is excluded from prism's timing.

    python tools/bench_train.py [--quick] [--threads 1] [--env mo-hopper-v5]

The last two lines are ``overhead_vs_bare_torch: <y>x`` (prism time per step ÷ bare time per step) and
``speedup_vs_morl_baselines: <x>x`` (prism env-steps/s ÷ morl-baselines env-steps/s).

``--cuda-graph``: prism runs with ``agent.cuda_graph: true`` and a fourth side joins, the bare loop with its
update captured in one CUDA graph (static replay rows, capturable fused Adam; on a CPU the same static update
runs eagerly), reported as ``overhead_vs_bare_graph: <z>x`` (prism ÷ bare graph, per step) just before the
last two lines.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings

import lightning as L
import numpy as np
import torch
from torch import nn

from prism.agents.capql import CAPQLModule
from prism.agents.config import CAPQLConfig
from prism.agents.preferences import cone_weights
from prism.envs import get_env_spec, make_env

HIDDEN = 256
BATCH = 128
BUFFER = 1_000_000
LR = 3e-4
GAMMA = 0.99
TAU = 0.005
ALPHA = 0.2
LEARNING_STARTS = 1000


class BareCAPQL:
    """The same CAPQL step in plain torch: no Lightning, no shaper, no logging, no module structure.

    Same maths and the same speed tricks as prism (critics stacked for bmm, fused Adam, critics evaluated
    with detached weights in the actor loss, one fused Polyak lerp), so the ratio measures prism's overhead.
    """

    def __init__(self, env, seed: int = 0, device: str = "cpu", graph: bool = False):
        self.env = env
        self.device = torch.device(device)
        self.graph_mode = graph
        o, a = env.observation_space.shape[0], env.action_space.shape[0]
        n_obj = env.unwrapped.reward_space.shape[0]
        self.o, self.a, self.L = o, a, n_obj
        torch.manual_seed(seed)
        self.actor = nn.Sequential(
            nn.Linear(o + n_obj, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, 2 * a),
        ).to(self.device)
        dims = [o + a + n_obj, HIDDEN, HIDDEN, n_obj]
        self.cw = [
            nn.init.orthogonal_(torch.empty(2, i, j)).to(self.device).requires_grad_()
            for i, j in zip(dims[:-1], dims[1:])
        ]
        self.cb = [torch.zeros(2, 1, j, device=self.device, requires_grad=True) for j in dims[1:]]
        self.tw = [w.detach().clone() for w in self.cw]
        self.tb = [b.detach().clone() for b in self.cb]
        extra = {"capturable": True} if graph and self.device.type == "cuda" else {}
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=LR, fused=True, **extra)
        self.critic_opt = torch.optim.Adam(self.cw + self.cb, lr=LR, fused=True, **extra)
        self.width = 2 * o + a + 2 * n_obj + 1
        self._index = torch.zeros(BATCH, dtype=torch.long, device=self.device)  # static, for the graph
        self._rows = torch.zeros(BATCH, self.width, device=self.device)
        self._graph: torch.cuda.CUDAGraph | None = None
        self._warm = 0
        self.storage = torch.zeros(BUFFER, self.width, device=self.device)
        self.ptr = self.size = self.steps = 0
        self.obs, _ = env.reset(seed=seed)
        env.action_space.seed(seed)
        self.weights = cone_weights(1024, n_obj, device=self.device)
        self.weights_np = self.weights.cpu().numpy()

    def _critic(self, x, ws, bs):
        h = x.unsqueeze(0).expand(2, *x.shape)
        for j, (w, b) in enumerate(zip(ws, bs)):
            h = torch.baddbmm(b, h, w)
            if j < 2:
                h = torch.relu(h)
        return h

    def _pi(self, obs, w):
        mean, log_std = self.actor(torch.cat([obs, w], 1)).split(self.a, 1)
        log_std = log_std.clamp(-20, 2)
        eps = torch.randn_like(mean)
        u = mean + log_std.exp() * eps
        logp = (-0.5 * eps.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(1)
        logp = logp - (2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(1)
        return torch.tanh(u), logp

    def step(self) -> None:
        i = self.steps % 1024
        if i == 0 and self.steps:
            self.weights = cone_weights(1024, self.L, device=self.device)
            self.weights_np = self.weights.cpu().numpy()
        w = self.weights_np[i]
        if self.steps < LEARNING_STARTS:
            action = self.env.action_space.sample()
        else:
            with torch.no_grad():
                obs = torch.as_tensor(self.obs, dtype=torch.float32, device=self.device)
                mean = self.actor(torch.cat([obs, self.weights[i]]).unsqueeze(0))[0, : self.a]
                action = torch.tanh(mean).cpu().numpy()
        next_obs, reward, terminated, truncated, _ = self.env.step(action)
        row = np.concatenate([self.obs, action, reward, next_obs, [float(terminated)], w]).astype(np.float32)
        self.storage[self.ptr].copy_(torch.from_numpy(row).to(self.device))
        self.ptr = (self.ptr + 1) % BUFFER
        self.size = min(self.size + 1, BUFFER)
        self.steps += 1
        self.obs = self.env.reset()[0] if terminated or truncated else next_obs
        if self.steps >= LEARNING_STARTS:
            self.update()

    def update(self) -> None:
        if not self.graph_mode:
            self._update_rows(self.storage[torch.randint(self.size, (BATCH,), device=self.device)])
            return
        self._index.random_(0, self.size)  # eager: the size changes every step
        if self.device.type != "cuda":
            self._static_update()
        elif self._graph is not None:
            self._graph.replay()
        elif self._warm < 3:  # real updates on a side stream, then capture
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._static_update()
            torch.cuda.current_stream().wait_stream(side)
            self._warm += 1
        else:
            self._graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self._graph):
                self._static_update()
            self._graph.replay()

    def _static_update(self) -> None:
        torch.index_select(self.storage, 0, self._index, out=self._rows)
        self._update_rows(self._rows)

    def _update_rows(self, rows: torch.Tensor) -> None:
        o, a, n_obj = self.o, self.a, self.L
        s, act, r = rows[:, :o], rows[:, o : o + a], rows[:, o + a : o + a + n_obj]
        s2 = rows[:, o + a + n_obj : 2 * o + a + n_obj]
        done, w = rows[:, 2 * o + a + n_obj], rows[:, 2 * o + a + n_obj + 1 :]
        with torch.no_grad():
            a2, logp2 = self._pi(s2, w)
            q2 = self._critic(torch.cat([s2, a2, w], 1), self.tw, self.tb).min(0).values
            y = r + GAMMA * (1 - done).unsqueeze(1) * (q2 - ALPHA * logp2.unsqueeze(1))
        q = self._critic(torch.cat([s, act, w], 1), self.cw, self.cb)
        critic_loss = (q - y).square().mean()
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()
        a_new, logp = self._pi(s, w)
        q_new = self._critic(
            torch.cat([s, a_new, w], 1), [x.detach() for x in self.cw], [x.detach() for x in self.cb]
        )
        actor_loss = (ALPHA * logp - (q_new.min(0).values * w).sum(1)).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(self.tw + self.tb, self.cw + self.cb, TAU)


class _Alternate(L.Callback):
    """Runs morl-baselines and bare blocks between prism's timed blocks; records each side's block times."""

    def __init__(
        self, block: int, rounds: int, morl, bare: BareCAPQL, ref_point: np.ndarray, bare_graph=None
    ):
        self.block, self.rounds = block, rounds
        self.morl, self.ref_point = morl, ref_point
        self.bares = {"bare": bare, **({"bare_graph": bare_graph} if bare_graph is not None else {})}
        self.times: dict[str, list[float]] = {"prism": [], "morl": [], **{k: [] for k in self.bares}}
        self._mark: float | None = None

    def on_train_start(self, trainer, module) -> None:
        # prism may run several env steps per Lightning batch: ask it to end a batch at every block boundary
        for k in range(self.rounds + 1):
            module.pause_at(LEARNING_STARTS + k * self.block)

    def _morl_steps(self, n: int) -> None:
        self.morl.train(total_timesteps=n, eval_env=None, ref_point=self.ref_point)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        steps = module.env_step_count
        if steps < LEARNING_STARTS or (steps - LEARNING_STARTS) % self.block:
            return
        if self._mark is None:  # prism just finished its random phase: warm the others up, untimed
            self._morl_steps(LEARNING_STARTS)
            for bare in self.bares.values():
                while bare.steps < LEARNING_STARTS:
                    bare.step()
        else:
            self.times["prism"].append(time.perf_counter() - self._mark)
            # Rotate the order of the others every round so none always runs right after prism.
            others = ["morl", *self.bares]
            shift = len(self.times["prism"]) % len(others)
            for name in others[shift:] + others[:shift]:
                t = time.perf_counter()
                if name == "morl":
                    self._morl_steps(self.block)
                else:
                    for _ in range(self.block):
                        self.bares[name].step()
                self.times[name].append(time.perf_counter() - t)
            print(
                f"  round {len(self.times['prism'])}/{self.rounds}: ms/step "
                + "  ".join(f"{k} {1e3 * v[-1] / self.block:.2f}" for k, v in self.times.items()),
                flush=True,
            )
        self._mark = time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer timed steps (finishes in under 2 minutes)"
    )
    parser.add_argument("--env", default="mo-hopper-v5")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, the same for all three sides")
    parser.add_argument("--steps", type=int, default=None, help="timed env steps per side")
    parser.add_argument("--block", type=int, default=None, help="env steps per alternation block")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="all three sides run there")
    parser.add_argument(
        "--cuda-graph",
        action="store_true",
        help="prism with agent.cuda_graph: true, plus a bare side with its update in one CUDA graph",
    )
    parser.add_argument(
        "--steps-per-batch",
        type=int,
        default=None,
        help="prism's agent.steps_per_batch (default: the config's)",
    )
    args = parser.parse_args()
    steps = args.steps or (600 if args.quick else 3000)
    block = args.block or (100 if args.quick else 250)
    rounds = max(1, steps // block)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_train: --device cuda but CUDA is not available")

    import mo_gymnasium as mo_gym
    from morl_baselines.multi_policy.capql.capql import CAPQL

    spec = get_env_spec(args.env)
    morl = CAPQL(
        mo_gym.make(args.env),
        learning_rate=LR,
        gamma=GAMMA,
        tau=TAU,
        buffer_size=BUFFER,
        net_arch=[HIDDEN, HIDDEN],
        batch_size=BATCH,
        num_q_nets=2,
        alpha=ALPHA,
        learning_starts=LEARNING_STARTS,
        log=False,
        seed=args.seed,
        device=args.device,
    )
    bare = BareCAPQL(make_env(spec), seed=args.seed, device=args.device)
    bare_graph = (
        BareCAPQL(make_env(spec), seed=args.seed, device=args.device, graph=True) if args.cuda_graph else None
    )
    config = CAPQLConfig(
        learning_starts=LEARNING_STARTS,
        batch_size=BATCH,
        buffer_size=BUFFER,
        gamma=GAMMA,
        tau=TAU,
        alpha=ALPHA,
        lr=LR,
        actor_hidden=[HIDDEN, HIDDEN],
        critic_hidden=[HIDDEN, HIDDEN],
        symmetry_mode="none",  # plain CAPQL, as morl-baselines
        log_every=1000,
        cuda_graph=args.cuda_graph,
        **({} if args.steps_per_batch is None else {"steps_per_batch": args.steps_per_batch}),
    )
    module = CAPQLModule(
        config,
        spec,
        lambda _member: make_env(spec),
        seeds=(args.seed,),
        target_env_steps=LEARNING_STARTS + rounds * block,
    )
    alternate = _Alternate(block, rounds, morl, bare, np.full(spec.n_objectives, -100.0), bare_graph)
    print(
        f"env {args.env}, torch threads {args.threads}, device {args.device}, {rounds * block} timed env steps per side "
        f"after {LEARNING_STARTS} random ones, alternating in blocks of {block}, prism steps_per_batch "
        f"{config.steps_per_batch}, cuda_graph {args.cuda_graph}, torch {torch.__version__}",
        flush=True,
    )
    L.Trainer(
        max_epochs=-1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="gpu" if args.device == "cuda" else "cpu",
        devices=1,
        callbacks=[alternate],
    ).fit(module)

    per_step = {k: sum(v) / (len(v) * block) for k, v in alternate.times.items()}
    labels = [("prism", "prism_capql"), ("morl", "morl_baselines_capql"), ("bare", "bare_torch")]
    for name, label in labels + ([("bare_graph", "bare_torch_graph")] if bare_graph is not None else []):
        print(f"{label}: {1 / per_step[name]:.1f} env-steps/s ({1e3 * per_step[name]:.2f} ms/step)")
    medians = {
        "overhead": statistics.median(
            p / b for p, b in zip(alternate.times["prism"], alternate.times["bare"])
        ),
        "speedup": statistics.median(
            m / p for m, p in zip(alternate.times["morl"], alternate.times["prism"])
        ),
    }
    print(f"median over rounds: overhead {medians['overhead']:.3f}x, speedup {medians['speedup']:.2f}x")
    if bare_graph is not None:
        print(f"overhead_vs_bare_graph: {per_step['prism'] / per_step['bare_graph']:.3f}x")
    print(f"overhead_vs_bare_torch: {per_step['prism'] / per_step['bare']:.3f}x")
    print(f"speedup_vs_morl_baselines: {per_step['morl'] / per_step['prism']:.2f}x")


if __name__ == "__main__":
    main()

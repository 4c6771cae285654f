"""Training throughput: prism's GPIPDAgent vs morl-baselines' GPIPDContinuousAction, same settings, one process.

Both sides are built from one :class:`~prism.agents.gpi_pd.config.GPIPDConfig` whose defaults are
morl-baselines' (20 gradient updates per env step, PER, TD3-style [256, 256] critics with LayerNorm and
dropout, batch 128, learning_starts 100; Dyna: a 5-member [200]×4 ensemble fitted every 250 env steps from
learning_starts, rollouts of length 5 every 250 env steps from step 1000, mixed batches of 10 % real rows once
the model buffer holds anything). SymReg is off (plain GPI-PD, as morl-baselines).

What is in the timed window, identically on both sides:

- env steps ``start + 1 … end`` (``--quick``: 150 → 450, a Dyna fit at 250; default: 150 → 1400, fits at
  250/500/750/1000/1250, rollouts at 1000/1250, mixed real/model batches after 1000); per env step one env
  step with the exploring policy and ``gradient_updates`` updates, plus whatever Dyna work falls due;
- every update on a *doubled* batch (the rows with the acting weight, then with weights drawn from the
  support): the state of both implementations after GPI-LS's first iteration. Both are given the same
  support (the L extreme weights) and acting weight e_1; the acting weight is redrawn from it at episode ends;
- no GPI-LS iteration (``timesteps_per_iter`` 10 000 is past the window; morl-baselines is driven through
  ``train_iteration``, the loop of one GPI-LS iteration, not ``train``), no evaluation, no logging (prism runs
  in a Lightning ``Trainer`` without logger; morl-baselines with ``log=False``, so no wandb).

Untimed: the random steps before learning_starts and the first updates up to ``start`` (warm-up) on both sides.
The two then alternate in chunks of env steps (prism chunk, morl-baselines chunk, …) so that load changes on
a shared machine hit both alike; the reported ratio is of summed times. prism runs inside its Lightning
``Trainer``; a callback runs morl-baselines' chunks between prism's chunks and is excluded from prism's timing.
morl-baselines' ``train_iteration`` resets its env when called; a wrapper makes that first reset of each chunk
return the current observation, so the chunks are one continuous run.

Known differences of the work done (the implementations', not the bench's): prism rolls out from
``min(dynamics_rollout_batch_size, real transitions stored)`` start states, morl-baselines always from 50 000
(5 chunks of 10 000); the model fits stop early on each side's own hold-out curve, so their epoch counts differ
(both are printed). Per-side breakdowns (updates, model fits, rollouts, the rest) are printed to show where
the time goes.

    python tools/bench_gpi_pd.py [--quick] [--threads 2] [--gradient-updates 20]

The last line is ``speedup_vs_morl_baselines: <x>x`` (prism env-steps/s ÷ morl-baselines env-steps/s).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import re
import time
import warnings
from collections import defaultdict

import gymnasium as gym
import lightning as L
import numpy as np
import torch

from prism.agents.gpi_pd.agent import GPIPDAgent
from prism.agents.gpi_pd.config import GPIPDConfig
from prism.envs import get_env_spec, make_env


class _ResumingEnv(gym.Wrapper):
    """Makes the first ``reset()`` after :meth:`resume` return the current observation (no new episode)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._obs = None
        self._resume = False

    def resume(self) -> None:
        self._resume = self._obs is not None

    def reset(self, **kwargs):
        if self._resume:
            self._resume = False
            return self._obs, {}
        self._obs, info = self.env.reset(**kwargs)
        return self._obs, info

    def step(self, action):
        out = self.env.step(action)
        self._obs = out[0]
        return out


class _Timers:
    """Wall time and call count per label, filled by :meth:`wrap` (an instance attribute shadows the method)."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.active = False
        self.results: dict[str, list] = defaultdict(list)

    def wrap(self, obj, name: str, label: str) -> None:
        method = getattr(obj, name)

        def timed(*args, **kwargs):
            t = time.perf_counter()
            out = method(*args, **kwargs)
            if self.active:
                self.seconds[label] += time.perf_counter() - t
                self.calls[label] += 1
                self.results[label].append(out)
            return out

        object.__setattr__(obj, name, timed)  # nn.Module.__setattr__ would do the same for a function


def build(args, cfg: GPIPDConfig, spec):
    """The two agents, from the same config and seed."""
    import mo_gymnasium as mo_gym
    from morl_baselines.multi_policy.gpi_pd.gpi_pd_continuous_action import GPIPDContinuousAction

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    morl_env = _ResumingEnv(mo_gym.make(args.env))
    morl_env.reset(seed=args.seed)
    morl_env.action_space.seed(args.seed)
    morl = GPIPDContinuousAction(
        morl_env,
        learning_rate=cfg.lr,
        gamma=cfg.gamma,
        tau=cfg.tau,
        buffer_size=cfg.buffer_size,
        net_arch=list(cfg.net_arch),
        batch_size=cfg.batch_size,
        num_q_nets=cfg.n_critics,
        delay_policy_update=cfg.policy_delay,
        learning_starts=cfg.learning_starts,
        gradient_updates=cfg.gradient_updates,
        policy_noise=cfg.policy_noise,
        noise_clip=cfg.noise_clip,
        per=cfg.per,
        min_priority=cfg.per_min_priority,
        alpha=cfg.per_alpha,
        dyna=cfg.dyna,
        dynamics_net_arch=list(cfg.dynamics_net_arch),
        dynamics_train_freq=cfg.dynamics_train_freq,
        dynamics_rollout_len=cfg.dynamics_rollout_len,
        dynamics_rollout_starts=cfg.dynamics_rollout_starts,
        dynamics_rollout_freq=cfg.dynamics_rollout_freq,
        dynamics_rollout_batch_size=cfg.dynamics_rollout_batch_size,
        dynamics_buffer_size=cfg.dynamics_buffer_size,
        dynamics_min_uncertainty=cfg.dynamics_min_uncertainty,
        dynamics_real_ratio=cfg.dynamics_real_ratio,
        log=False,
        seed=args.seed,
        device=args.device,
    )
    prism = GPIPDAgent(
        cfg, spec, lambda _member: make_env(spec), seeds=(args.seed,), target_env_steps=args.end
    )
    return morl, prism


class _Alternate(L.Callback):
    """Runs morl-baselines' chunks between prism's timed chunks; records each side's chunk times."""

    def __init__(self, args, morl, support: list[np.ndarray], timers: dict[str, _Timers]):
        self.args, self.morl, self.support, self.timers = args, morl, support, timers
        self.bounds = list(range(args.start, args.end + 1, args.chunk))
        self.times: dict[str, list[float]] = {"prism": [], "morl": []}
        self._mark: float | None = None
        self.morl_fit_epochs: list[int] = []

    def on_train_start(self, trainer, module) -> None:
        # The state of a GPI-LS iteration whose weight set M is the support: doubled into every update's batch
        # (morl-baselines' weight_support during train_iteration).
        module._set_iteration_weights(list(self.support))
        module._weight = self.support[0]
        for b in self.bounds:
            module.pause_at(b)

    def _morl_steps(self, n: int) -> None:
        self.morl.env.resume()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):  # its model fit prints one line per fit
            self.morl.train_iteration(
                total_timesteps=n,
                weight=self.support[0],
                weight_support=self.support,
                change_weight_every_episode=True,
                eval_env=None,
                reset_num_timesteps=False,
            )
        if self.timers["morl"].active:
            self.morl_fit_epochs += [int(e) for e in re.findall(r"Epoch: (\d+)", out.getvalue())]

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        steps = module.env_step_count
        if steps not in self.bounds:
            return
        if self._mark is None:  # prism's warm-up is done: warm morl-baselines up too, untimed
            self._morl_steps(steps)
            for t in self.timers.values():
                t.active = True
        else:
            self.times["prism"].append(time.perf_counter() - self._mark)
            t = time.perf_counter()
            self._morl_steps(self.args.chunk)
            self.times["morl"].append(time.perf_counter() - t)
            k, n = len(self.times["prism"]), len(self.bounds) - 1
            print(
                f"  chunk {k}/{n} (env steps {steps - self.args.chunk}-{steps}): ms/step "
                + "  ".join(f"{name} {1e3 * v[-1] / self.args.chunk:.1f}" for name, v in self.times.items()),
                flush=True,
            )
        self._mark = time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="env steps 150-450 (about 2 minutes)")
    parser.add_argument("--env", default="mo-hopper-v5")
    parser.add_argument("--threads", type=int, default=2, help="torch threads, the same for both sides")
    parser.add_argument("--start", type=int, default=150, help="first env step of the timed window")
    parser.add_argument("--end", type=int, default=None, help="last env step of the timed window")
    parser.add_argument("--chunk", type=int, default=None, help="env steps per alternation chunk")
    parser.add_argument(
        "--gradient-updates", type=int, default=None, help="updates per env step, both sides (default 20)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="both sides run there")
    args = parser.parse_args()
    args.end = args.end or (450 if args.quick else 1400)
    args.chunk = args.chunk or (50 if args.quick else 125)
    if (args.end - args.start) % args.chunk or args.end <= args.start:
        raise SystemExit("bench_gpi_pd: --end - --start must be a positive multiple of --chunk")
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_gpi_pd: --device cuda but CUDA is not available")

    spec = get_env_spec(args.env)
    overrides = {} if args.gradient_updates is None else {"gradient_updates": args.gradient_updates}
    cfg = GPIPDConfig(symreg_lambda=0.0, **overrides)
    if args.start < max(cfg.learning_starts, cfg.batch_size):
        raise SystemExit("bench_gpi_pd: --start must be at least learning_starts and batch_size")
    morl, prism = build(args, cfg, spec)
    support = [row for row in np.eye(spec.n_objectives)]
    timers = {"prism": _Timers(), "morl": _Timers()}
    timers["prism"].wrap(prism, "_update_and_accumulate", "updates")
    timers["prism"].wrap(prism.dynamics, "fit", "model fit")
    timers["prism"].wrap(prism, "_rollout_model", "rollout")
    timers["morl"].wrap(morl, "update", "updates")
    timers["morl"].wrap(morl.dynamics, "fit", "model fit")
    timers["morl"].wrap(morl, "_rollout_dynamics", "rollout")
    alternate = _Alternate(args, morl, support, timers)
    print(
        f"env {args.env}, torch threads {args.threads}, device {args.device}, timed env steps "
        f"{args.start}-{args.end} per side in chunks of {args.chunk}, gradient_updates {cfg.gradient_updates}, "
        f"batch {cfg.batch_size} doubled with a support of {len(support)} weights, dyna {cfg.dyna}",
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
    ).fit(prism)

    steps = args.end - args.start
    total = {k: sum(v) for k, v in alternate.times.items()}
    prism_epochs = [r.epochs for r in timers["prism"].results["model fit"]]
    epochs = {"prism": prism_epochs, "morl": alternate.morl_fit_epochs}
    rows = {"prism": len(prism.model_buffer or []), "morl": len(morl.dynamics_buffer or [])}
    print("ms per timed env step:")
    print(
        f"{'':24s}{'env-steps/s':>12s}{'ms/step':>10s}{'updates':>10s}{'model fit':>11s}{'rollout':>10s}{'rest':>8s}"
    )
    for name, label in (("prism", "prism_gpi_pd"), ("morl", "morl_baselines_gpi_pd")):
        parts = [timers[name].seconds[k] for k in ("updates", "model fit", "rollout")]
        cells = "".join(f"{1e3 * s / steps:>{w}.1f}" for s, w in zip(parts, (10, 11, 10)))
        rest = 1e3 * (total[name] - sum(parts)) / steps
        print(f"{label:24s}{steps / total[name]:>12.2f}{1e3 * total[name] / steps:>10.1f}{cells}{rest:>8.1f}")
    for name in ("prism", "morl"):
        fit_s, n_epochs = timers[name].seconds["model fit"], sum(epochs[name])
        per_epoch = f"{1e3 * fit_s / n_epochs:.0f} ms/epoch" if n_epochs else "-"
        print(f"  {name}: model fit epochs {epochs[name]} ({per_epoch}), model buffer rows {rows[name]}")
    updates = {k: timers[k].seconds["updates"] for k in timers}
    print(f"updates only (the window's gradient steps): {updates['morl'] / updates['prism']:.2f}x")
    print(f"speedup_vs_morl_baselines: {total['morl'] / total['prism']:.2f}x")


if __name__ == "__main__":
    main()

"""Dyna for GPI-PD (Alegre et al., AAMAS 2023): a probabilistic ensemble dynamics model and uncertainty-filtered
model rollouts that fill a model replay buffer.

Semantics and defaults follow morl-baselines (``common/model_based/probabilistic_ensemble.py``, ``utils.py`` and
``gpi_pd_continuous_action.py``), which follow PETS (Chua et al., 2018) and MBPO (Janner et al., 2019):

- **Model.** ``E = 5`` members, ``2`` elites; each member is a ReLU MLP ``[s, a] -> [200]×4 ->`` a Gaussian over
  ``y = [s' − s, r]`` (mean and log-variance per output). Members are the slices of one
  :class:`~prism.agents.networks.StackedMLP` (one ``baddbmm`` per layer for all members, as prism's critics).
  Inputs are standardised with the mean/std of the whole fitted data set; targets are not.
- **Bounded log-variance.** ``logvar = max − softplus(max − raw)``, then ``min + softplus(logvar − min)``, with
  ``max``/``min`` learned per output (initialised 0.5 and −10) and pulled together by ``0.01·(Σmax − Σmin)``.
- **Fit.** Gaussian NLL (:func:`gaussian_nll`) plus that bound term, Adam (lr 1e-3, per-layer L2 decay
  2.5e-5, 5e-5, 7.5e-5, 7.5e-5, 1e-4, a fresh optimiser every fit), minibatches of 256 over a bootstrap resample
  per member. A random 10 % (≤ 5000) is held out; after each epoch the ``2`` members with the lowest hold-out MSE
  become the elites; training stops after 5 epochs in which no member improved its best hold-out MSE by > 1 %,
  or after 200 epochs. Every fit warm-starts from the current weights.
- **Rollout.** From real start states, for ≤ ``horizon`` (5) steps: the agent's policy acts, every member predicts,
  the uncertainty is the ensemble's mixture std summed over outputs (:func:`ensemble_uncertainty`, all members),
  and the transition is *sampled* from the Gaussian of one elite drawn uniformly per row. Transitions whose
  uncertainty is ``≥ threshold`` (2.0) are dropped. Termination is not learned: it is a known function of the
  predicted state (:data:`TERMINATION_FNS`, as morl-baselines' ``termination_fn_*``; never for the others).

Deviations, all deliberate: an uncertain row *stops* (``stop_uncertain=True``; morl-baselines drops the
transition but keeps rolling out from the untrusted predicted state — pass ``False`` for that); weights are
initialised per member like prism's other networks (orthogonal on each ``[d_out, d_in]`` slice, gain √2) where
morl-baselines applies ``orthogonal_`` to the whole ``[E, d_in, d_out]`` tensor; a hold-out of at least one row.

**The sparse reward channel in model rollouts.** The model is trained on the rewards *as stored in replay*, i.e.
after the reward shaper: ReSymNet-redistributed for PRISM, uniform/random-redistributed for those baselines, the
emitted (delayed) sparse reward for the sparse baseline. Model rollouts therefore carry the same shaped sparse
channel that the real transitions carry, and the Q-learner sees one reward definition whether a transition is
real or imagined. The alternative — predicting the environment's emitted reward and re-shaping imagined
transitions with the reward model — is *not* done (it would need segment context a one-step model lacks).
Note that a shaper which releases rewards at segment ends stores transitions late; the model is fitted on
whatever ``ReplayBuffer.all()`` holds at fit time.

Randomness: every draw (hold-out split, bootstrap, minibatch order, elite choice, Gaussian sample) comes from the
``torch.Generator`` passed in, so a fit or a rollout is a function of the weights, the data and that generator
(the policy's own noise is the caller's).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from prism.agents.builders import adam
from prism.agents.networks import StackedMLP
from prism.data.replay import ReplayBatch

DEFAULT_HIDDEN = (200, 200, 200, 200)
HIDDEN_WEIGHT_DECAYS = (2.5e-5, 5e-5, 7.5e-5, 7.5e-5)
"""L2 decay of hidden layer j (the last entry repeats for deeper models); morl-baselines' values."""
OUTPUT_WEIGHT_DECAY = 1e-4
LOGVAR_BOUND_COEF = 0.01
"""Weight of ``Σ max_logvar − Σ min_logvar`` in the fit loss (keeps the learned bounds tight)."""
INIT_MAX_LOGVAR = 0.5
INIT_MIN_LOGVAR = -10.0

Policy = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``policy(obs [B, obs_dim], weight [B, L]) -> action [B, act_dim]`` (exploration noise is the caller's)."""
TerminationFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""``fn(obs, action, next_obs, reward) -> done [B] bool`` — termination as a known function of the state."""


class DynamicsFit(NamedTuple):
    """What :meth:`ProbabilisticEnsemble.fit` did."""

    epochs: int
    train_loss: list[float]  # mean minibatch loss (NLL + bound term) per epoch
    holdout_mse: list[float]  # per member, after the last epoch
    holdout_history: list[list[float]]  # per epoch, per member
    elites: list[int]  # the members rollouts sample from, best first


class ModelRollout(NamedTuple):
    """Imagined transitions of :meth:`ProbabilisticEnsemble.rollout`, step-major, and their uncertainties."""

    batch: ReplayBatch  # the kept transitions (uncertainty < threshold); ``done`` is 1.0 where terminated
    uncertainty: torch.Tensor  # [proposed] uncertainty of every proposed transition, kept or dropped
    kept: torch.Tensor  # [proposed] bool: which proposed transitions are in ``batch``


def bound_logvar(raw: torch.Tensor, max_logvar: torch.Tensor, min_logvar: torch.Tensor) -> torch.Tensor:
    """Soft-clamp a raw log-variance into ``(min_logvar, max_logvar)`` (as PETS/MBPO code does; differentiable, so the
    bounds themselves are learned): ``max − softplus(max − raw)``, then ``min + softplus(· − min)``."""
    logvar = max_logvar - F.softplus(max_logvar - raw)
    return min_logvar + F.softplus(logvar - min_logvar)


def gaussian_nll(mean: torch.Tensor, logvar: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-element Gaussian negative log-likelihood without the constant (PETS' probabilistic loss):
    ``½ (log σ² + (y − μ)² / σ²)`` — ``F.gaussian_nll_loss`` up to its variance floor of 1e-6."""
    return 0.5 * (logvar + (target - mean).square() * torch.exp(-logvar))


def ensemble_uncertainty(mean: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """Std of the equally weighted mixture of the members' Gaussians (Lakshminarayanan et al., 2017), summed over
    the outputs: ``Σ_d sqrt(mean_k(μ_kd² + σ_kd²) − (mean_k μ_kd)²)``; ``mean, logvar [E, B, D] -> [B]``.
    It grows with member disagreement (spread of μ) and with the members' own predicted noise (σ²)."""
    mixture_mean = mean.mean(dim=0)
    mixture_var = (mean.square() + logvar.exp()).mean(dim=0) - mixture_mean.square()
    return torch.sqrt(mixture_var.clamp_min(0.0) + 1e-12).sum(dim=-1)


def hopper_termination(obs, action, next_obs, reward) -> torch.Tensor:
    """Hopper-v5's ``not is_healthy`` on the observation ``qpos[1:] ++ clip(qvel)``: height ``> 0.7``, torso
    angle in ``(−0.2, 0.2)``, every entry after the height in ``(−100, 100)``."""
    healthy = (
        torch.isfinite(next_obs).all(dim=-1)
        & (next_obs[:, 1:].abs() < 100.0).all(dim=-1)
        & (next_obs[:, 0] > 0.7)
        & (next_obs[:, 1].abs() < 0.2)
    )
    return ~healthy


def walker2d_termination(obs, action, next_obs, reward) -> torch.Tensor:
    """Walker2d-v5's ``not is_healthy``: height in ``(0.8, 2.0)``, torso angle in ``(−1, 1)``."""
    z, angle = next_obs[:, 0], next_obs[:, 1]
    return ~((z > 0.8) & (z < 2.0) & (angle > -1.0) & (angle < 1.0))


TERMINATION_FNS: dict[str, TerminationFn] = {
    "mo-hopper-v5": hopper_termination,
    "mo-walker2d-v5": walker2d_termination,
}
"""Known termination functions by env id; an env not listed never terminates in model rollouts
(half-cheetah and swimmer only truncate)."""


class ProbabilisticEnsemble(nn.Module):
    """``E`` Gaussian MLPs ``p_k(s' − s, r | s, a)`` trained together; see the module docstring."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        n_objectives: int,
        *,
        ensemble_size: int = 5,
        n_elites: int = 2,
        hidden: Sequence[int] = DEFAULT_HIDDEN,
        learning_rate: float = 1e-3,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        if not 1 <= n_elites <= ensemble_size:
            raise ValueError(f"n_elites: must be in [1, ensemble_size={ensemble_size}], got {n_elites}")
        self.obs_dim, self.act_dim, self.n_objectives = obs_dim, act_dim, n_objectives
        self.ensemble_size, self.n_elites, self.learning_rate = ensemble_size, n_elites, learning_rate
        in_dim, self.out_dim = obs_dim + act_dim, obs_dim + n_objectives
        self.net = StackedMLP([in_dim, *hidden, 2 * self.out_dim], ensemble_size)
        gain = nn.init.calculate_gain("relu")
        for k in range(ensemble_size):
            self.net.init_slice(k, generator)
        with torch.no_grad():
            for w in self.net.weights:
                w.mul_(gain)  # orthogonal_(gain=g) is g × orthogonal_: same draw, ReLU gain
        self.max_logvar = nn.Parameter(torch.full((1, self.out_dim), INIT_MAX_LOGVAR))
        self.min_logvar = nn.Parameter(torch.full((1, self.out_dim), INIT_MIN_LOGVAR))
        self.register_buffer("input_mean", torch.zeros(1, in_dim))
        self.register_buffer("input_std", torch.ones(1, in_dim))
        # Before the first fit every member is an "elite" (morl-baselines); a mask keeps the buffer's shape fixed.
        self.register_buffer("elite_mask", torch.ones(ensemble_size, dtype=torch.bool))
        n_layers = len(self.net.weights)
        self.weight_decays = [
            HIDDEN_WEIGHT_DECAYS[min(j, len(HIDDEN_WEIGHT_DECAYS) - 1)] for j in range(n_layers - 1)
        ] + [OUTPUT_WEIGHT_DECAY]

    @property
    def elites(self) -> torch.Tensor:
        """Indices of the elite members (long ``[n]``)."""
        return self.elite_mask.nonzero().flatten()

    def predict(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every member's mean and bounded log-variance of ``[s' − s, r]``: ``[B, ·] -> [E, B, obs_dim + L]``."""
        return self._forward(torch.cat([obs, action], dim=-1))

    def _forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [B, in]`` (same input for every member) or ``[E, B, in]`` (one per member) -> mean, logvar."""
        h = (x - self.input_mean) / self.input_std
        if h.dim() == 2:
            h = h.unsqueeze(0).expand(self.ensemble_size, *h.shape)
        mean, raw_logvar = self.net(h).split(self.out_dim, dim=-1)
        return mean, bound_logvar(raw_logvar, self.max_logvar, self.min_logvar)

    def loss(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Fit loss: mean Gaussian NLL over members, rows and outputs, plus the log-variance bound term."""
        mean, logvar = self._forward(x)
        bound = LOGVAR_BOUND_COEF * (self.max_logvar.sum() - self.min_logvar.sum())
        return gaussian_nll(mean, logvar, target).mean() + bound

    @torch.no_grad()
    def holdout_mse(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Per-member MSE of the predicted mean on ``(x [B, in], target [B, D])``: ``[E]``."""
        mean, _ = self._forward(x)
        return (mean - target).square().mean(dim=(1, 2))

    def fit(
        self,
        data: ReplayBatch,
        generator: torch.Generator | None = None,
        *,
        batch_size: int = 256,
        holdout_ratio: float = 0.1,
        max_holdout: int = 5000,
        max_epochs: int = 200,
        patience: int = 5,
        min_relative_improvement: float = 0.01,
    ) -> DynamicsFit:
        """Train on the transitions of ``data`` (e.g. ``ReplayBuffer.all()``) until the hold-out MSE stalls.

        An epoch is one pass over each member's bootstrap resample of the training split. Training stops once
        ``patience`` epochs in a row improved no member's best hold-out MSE by more than
        ``min_relative_improvement`` (relative), or after ``max_epochs``. Elites are re-chosen every epoch.
        """
        device = self.input_mean.device
        rng_device = generator.device if generator is not None else torch.device("cpu")
        x = torch.cat([data.obs, data.action], dim=-1).to(device, torch.float32)
        y = torch.cat([data.next_obs - data.obs, data.reward], dim=-1).to(device, torch.float32)
        n = x.shape[0]
        if n < 2:
            raise ValueError(f"ProbabilisticEnsemble.fit: needs at least 2 transitions, got {n}")
        std = x.std(dim=0, unbiased=False, keepdim=True)
        self.input_mean.copy_(x.mean(dim=0, keepdim=True))
        self.input_std.copy_(torch.where(std < 1e-12, torch.ones_like(std), std))

        n_holdout = max(1, min(int(n * holdout_ratio), max_holdout))
        order = torch.randperm(n, generator=generator, device=rng_device).to(device)
        x_hold, y_hold = x[order[:n_holdout]], y[order[:n_holdout]]
        x_train, y_train = x[order[n_holdout:]], y[order[n_holdout:]]
        n_train = x_train.shape[0]
        # Bootstrap: member k trains on n_train rows drawn with replacement (its own resample, fixed for this fit).
        boot = torch.randint(n_train, (self.ensemble_size, n_train), generator=generator, device=rng_device)

        optimizer = adam(
            [
                {"params": [w, b], "weight_decay": decay}
                for (w, b), decay in zip(self.net.layers(), self.weight_decays)
            ]
            + [{"params": [self.max_logvar, self.min_logvar]}],
            self.learning_rate,
        )
        best = [math.inf] * self.ensemble_size
        stale, epoch, history, holdout_history = 0, 0, [], []
        mse = torch.zeros(self.ensemble_size)
        while stale < patience and epoch < max_epochs:
            self.train()
            epoch_loss, n_batches = 0.0, 0
            for start in range(0, n_train, batch_size):
                index = boot[:, start : start + batch_size].to(device)
                loss = self.loss(x_train[index], y_train[index])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                epoch_loss, n_batches = epoch_loss + loss.item(), n_batches + 1
            history.append(epoch_loss / n_batches)
            # Reshuffle each member's resample independently for the next epoch's minibatches.
            shuffle = torch.rand(boot.shape, generator=generator, device=rng_device).argsort(dim=1)
            boot = boot.gather(1, shuffle)

            self.eval()
            mse = self.holdout_mse(x_hold, y_hold).cpu()
            holdout_history.append(mse.tolist())
            self.elite_mask.zero_()
            self.elite_mask[mse.argsort()[: self.n_elites].to(device)] = True
            improved = False
            for k, value in enumerate(mse.tolist()):
                if epoch == 0 or (best[k] - value) / best[k] > min_relative_improvement:
                    best[k], improved = value, True
            stale = 0 if improved else stale + 1
            epoch += 1
        elites = mse.argsort()[: self.n_elites].tolist()
        return DynamicsFit(epoch, history, mse.tolist(), holdout_history, elites)

    @torch.no_grad()
    def rollout(
        self,
        start_obs: torch.Tensor,
        policy: Policy,
        weight: torch.Tensor,
        *,
        horizon: int = 5,
        threshold: float = 2.0,
        generator: torch.Generator | None = None,
        termination_fn: TerminationFn | None = None,
        stop_uncertain: bool = True,
    ) -> ModelRollout:
        """Imagined transitions from real states ``start_obs [B, obs_dim]`` under ``policy`` and ``weight``.

        ``weight`` is one preference ``[L]`` for every row (GPI-PD rolls out with the weight being trained) or
        one per row ``[B, L]``; it is stored with each transition. A row stops when it terminates
        (``termination_fn``; never when None) or — with ``stop_uncertain`` — when its uncertainty reaches
        ``threshold``; a transition is kept iff its uncertainty is below ``threshold``.
        """
        rng_device = generator.device if generator is not None else torch.device("cpu")
        obs = start_obs.to(self.input_mean.device, torch.float32)
        weight = weight.to(obs)
        weight = weight.expand(obs.shape[0], -1) if weight.dim() == 1 else weight
        elites = self.elites.to(rng_device)
        fields: list[list[torch.Tensor]] = [[] for _ in range(6)]
        uncertainties, kept = [], []
        for _ in range(horizon):
            rows = obs.shape[0]
            if rows == 0:
                break
            action = policy(obs, weight)
            mean, logvar = self.predict(obs, action)
            uncertainty = ensemble_uncertainty(mean, logvar)
            member = elites[torch.randint(len(elites), (rows,), generator=generator, device=rng_device)]
            member = member.to(obs.device)
            row = torch.arange(rows, device=obs.device)
            mu, std = mean[member, row], torch.exp(0.5 * logvar[member, row])
            noise = torch.randn(mu.shape, generator=generator, device=rng_device).to(mu)
            sample = mu + std * noise
            next_obs, reward = obs + sample[:, : self.obs_dim], sample[:, self.obs_dim :]
            if termination_fn is None:
                done = torch.zeros(rows, dtype=torch.bool, device=obs.device)
            else:
                done = termination_fn(obs, action, next_obs, reward).reshape(rows).to(torch.bool)
            certain = uncertainty < threshold
            for store, value in zip(fields, (obs, action, reward, next_obs, done.float(), weight)):
                store.append(value[certain])
            uncertainties.append(uncertainty)
            kept.append(certain)
            alive = ~done & (certain | (not stop_uncertain))
            obs, weight = next_obs[alive], weight[alive]
        if not uncertainties:  # horizon 0 or no start states
            empty = start_obs.new_zeros(0)
            return ModelRollout(self._empty_batch(start_obs), empty, empty.bool())
        batch = ReplayBatch(*(torch.cat(store) for store in fields))
        return ModelRollout(batch, torch.cat(uncertainties), torch.cat(kept))

    def _empty_batch(self, like: torch.Tensor) -> ReplayBatch:
        z = like.new_zeros
        o, a, L = self.obs_dim, self.act_dim, self.n_objectives
        return ReplayBatch(z(0, o), z(0, a), z(0, L), z(0, o), z(0), z(0, L))

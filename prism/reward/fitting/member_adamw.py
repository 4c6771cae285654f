"""AdamW over parameters stacked along a leading member dimension, each member with its own step count: the
optimiser of a population's stacked reward fit (:mod:`prism.reward.fitting.stacked`), where a store whose epoch has run
out of batches sits out the step exactly as its lone fit would by not taking it."""

from __future__ import annotations

import torch


class MemberAdamW(torch.optim.Optimizer):
    """AdamW (torch's maths, decoupled weight decay) over parameters stacked along a leading member dimension,
    with a step count per member. ``active`` (host bools ``[M]``, set before each step) names the members
    that take this step; the others' weights and moments are left exactly as they were."""

    def __init__(self, params, members: int, lr: float, weight_decay: float, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps))
        self.members = members
        self.steps = [0] * members
        self.active: list[bool] | None = None

    def state_dict(self) -> dict:
        return {**super().state_dict(), "member_steps": list(self.steps)}

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        steps = state_dict.pop("member_steps")
        super().load_state_dict(state_dict)
        self.steps = [int(n) for n in steps]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        active = [True] * self.members if self.active is None else list(self.active)
        self.steps = [n + 1 if a else n for n, a in zip(self.steps, active)]
        counts = [max(n, 1) for n in self.steps]
        every = all(active)
        per_device: dict = {}
        for group in self.param_groups:
            lr, wd, (beta1, beta2), eps = group["lr"], group["weight_decay"], group["betas"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                key = (p.device, p.dtype)
                if key not in per_device:  # one small host-to-device copy per step and device
                    per_device[key] = torch.tensor(
                        [
                            [float(a), lr / (1 - beta1**c), (1 - beta2**c) ** 0.5]
                            for a, c in zip(active, counts)
                        ],
                        dtype=p.dtype,
                    ).to(p.device)
                table = per_device[key]
                shape = (self.members,) + (1,) * (p.dim() - 1)
                on, step_size, bc2_sqrt = (table[:, j].view(shape) for j in range(3))
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                grad, m, v = p.grad, state["exp_avg"], state["exp_avg_sq"]
                # Member by member what torch.optim.AdamW's single-tensor step computes with its own count.
                if every:  # in place, the same arithmetic: no copies when no member sits the step out
                    new_p, new_m, new_v = p.mul_(1 - lr * wd), m.lerp_(grad, 1 - beta1), v.mul_(beta2)
                else:
                    new_p, new_m, new_v = p * (1 - lr * wd), m.lerp(grad, 1 - beta1), v * beta2
                new_v.addcmul_(grad, grad, value=1 - beta2)
                denom = (new_v.sqrt() / bc2_sqrt).add_(eps)
                new_p.addcdiv_(new_m * step_size, denom, value=-1.0)
                if not every:
                    keep = on.bool()
                    p.copy_(torch.where(keep, new_p, p))
                    m.copy_(torch.where(keep, new_m, m))
                    v.copy_(torch.where(keep, new_v, v))
        return loss


__all__ = ["MemberAdamW"]

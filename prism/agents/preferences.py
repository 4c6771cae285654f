"""Training-preference sampler of CAPQL (docs/method.md §6): weights from a cone around the uniform weight."""

from __future__ import annotations

import math

import torch


def cone_weights(
    n: int,
    n_objectives: int,
    *,
    half_angle: float = math.pi / 8,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """``n`` preference weights on the simplex, within ``half_angle`` (radians) of the uniform direction.

    docs/method.md §6: ``w0 = 1/‖1‖``; ``s ~ N(0, I)`` projected orthogonal to ``w0`` and normalised;
    ``θ ~ U(0, half_angle)``; ``w = (tan θ·s + w0) / ‖tan θ·s + w0‖₁``. With the default 22.5° and two
    objectives every entry lies in ``[(1 − tan 22.5°)/2, (1 + tan 22.5°)/2] ≈ [0.293, 0.707]``.

    Returns a float32 tensor ``[n, n_objectives]`` whose rows are non-negative and sum to 1.
    """
    if n_objectives < 2:
        raise ValueError(f"cone_weights: need at least 2 objectives, got {n_objectives}")
    w0 = torch.full((n_objectives,), 1.0 / math.sqrt(n_objectives), device=device)
    s = torch.randn(n, n_objectives, generator=generator, device=device)
    s = s - (s @ w0).unsqueeze(1) * w0
    s = s / s.norm(dim=1, keepdim=True).clamp_min(1e-12)
    theta = torch.rand(n, 1, generator=generator, device=device) * half_angle
    w = torch.tan(theta) * s + w0
    # tan(θ) < 1 for θ < 45°, so every entry stays positive and the L1 norm is the plain sum.
    return w / w.abs().sum(dim=1, keepdim=True)

"""An independent numpy reference of the Biot-Savart sums of ``CONVENTIONS.md`` (core paper
Eq. 3-9): Gaussian cores, velocity ``u_i = 1/(4 pi) sum_j K(r) alpha_j x d`` and classical
stretching ``(alpha_i . grad) u``, O(N M) in f64, in chunks of targets. It shares no code with
the Rust engine: the tests and benchmarks check the engine against it."""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

_erf = np.frompyfunc(math.erf, 1, 1)


def _chunk(x, alpha, sigma, t, at):
    d = t[:, None, :] - x[None, :, :]  # x_i - x_j
    r = np.sqrt((d * d).sum(-1))
    rho = r / sigma[None, :]
    g = np.exp(-rho * rho / 2)
    q = _erf(rho / math.sqrt(2)).astype(float) - math.sqrt(2 / math.pi) * rho * g
    dq = math.sqrt(2 / math.pi) * rho * rho * g / sigma[None, :]
    zero = r == 0  # the element itself (a particle does not act on itself)
    rs = np.where(zero, 1.0, r)
    k = np.where(zero, 0.0, q / rs**3)
    kp_over_r = np.where(zero, 0.0, (dq / rs**3 - 3 * q / rs**4) / rs)
    aj_x_d = np.cross(alpha[None, :, :], d)
    u = (k[..., None] * aj_x_d).sum(1)
    aj_x_ai = np.cross(alpha[None, :, :], at[:, None, :])
    ai_d = (at[:, None, :] * d).sum(-1)
    s = (k[..., None] * aj_x_ai + (kp_over_r * ai_d)[..., None] * aj_x_d).sum(1)
    return u / (4 * math.pi), s / (4 * math.pi)


def direct_sum(
    x: np.ndarray,
    alpha: np.ndarray,
    sigma: np.ndarray,
    targets: Optional[np.ndarray] = None,
    target_strength: Optional[np.ndarray] = None,
    chunk: int = 64,
) -> Tuple[np.ndarray, np.ndarray]:
    """Velocity and stretching at ``targets`` (the elements themselves when None) with the
    strengths ``target_strength`` of the elements sitting there (zero for plain points)."""
    x, alpha, sigma = (np.asarray(a, dtype=np.float64) for a in (x, alpha, sigma))
    if targets is None:
        t, at = x, alpha
    else:
        t = np.asarray(targets, dtype=np.float64)
        at = np.zeros_like(t) if target_strength is None else np.asarray(target_strength, float)
    u = np.empty_like(t)
    s = np.empty_like(t)
    for i in range(0, len(t), chunk):
        u[i:i + chunk], s[i:i + chunk] = _chunk(x, alpha, sigma, t[i:i + chunk], at[i:i + chunk])
    return u, s


def rel_l2(value: np.ndarray, reference: np.ndarray) -> float:
    """Relative L2 error ``sqrt(sum |v - v_ref|^2 / sum |v_ref|^2)`` (CONVENTIONS.md)."""
    return float(np.linalg.norm(value - reference) / np.linalg.norm(reference))

#!/usr/bin/env python3
"""Side by side with fmm3dpy (Flatiron FMM3D, Laplace) on the standard set (BENCHMARKS.md).

What is compared: velocity u and stretching (alpha . grad) u of every element.
* pyvortex: `evaluate(x, alpha, sigma)` (Gaussian cores, FMM, the given order/theta), error
  against the numpy direct sum of the same Gaussian kernel (`pyvortex.reference`).
* fmm3dpy: ONE call `lfmm3d(eps, sources=x, charges=alpha^T, nd=3, pg=3)`: the three
  components of alpha as three charge densities give the vector potential
  psi^k = sum_j alpha_j^k / (4 pi r) with its gradient and Hessian at every source; then
  u = curl psi and grad u from the Hessians (9 numbers per element), and
  s = (alpha . grad) u. This is the singular Biot-Savart kernel (q = 1): the Gaussian cores
  only change the near field, which an FMM evaluates directly anyway. Error against fmm3dpy's
  own direct sum `l3ddir` of the same (singular) kernel.
Both errors are relative L2 over the same `--sample` elements (CONVENTIONS.md); the time is
the wall time of the call(s) that produce u and s for all N elements (for fmm3dpy including
the curl and the contraction with alpha in numpy). Threads: pyvortex `threads=`; fmm3dpy
OpenMP (OMP_NUM_THREADS, set before its import: run this script once per thread count).

    OMP_NUM_THREADS=1 python3 python/bench/fmm3d_compare.py --n 1e5 --threads 1
    python3 python/bench/fmm3d_compare.py --n 1e5 --threads 2
"""
import argparse
import os
import time

import numpy as np

import pyvortex as pv
from pyvortex.reference import direct_sum, rel_l2


def fmm3d_fields(fmm3dpy, eps, x, alpha):
    out = fmm3dpy.lfmm3d(eps=eps, sources=np.ascontiguousarray(x.T),
                         charges=np.ascontiguousarray(alpha.T), nd=3, pg=3)
    return curl_and_stretching(out.grad, out.hess, alpha)


def curl_and_stretching(grad, hess, alpha):
    # grad: (3 densities, 3, N) = d psi^b / d x_a; hess: (3, 6, N) in xx, yy, zz, xy, xz, yz
    g = grad
    u = np.stack([g[2, 1] - g[1, 2], g[0, 2] - g[2, 0], g[1, 0] - g[0, 1]], axis=1)
    idx = [[0, 3, 4], [3, 1, 5], [4, 5, 2]]
    h = hess[:, idx, :]  # (b, m, a, N) = d^2 psi^b / dx_m dx_a
    # du_l/dx_m = eps_lab d_m d_a psi^b
    du = np.empty((3, 3, h.shape[-1]))  # (l, m, N)
    for m in range(3):
        du[0, m] = h[2, m, 1] - h[1, m, 2]
        du[1, m] = h[0, m, 2] - h[2, m, 0]
        du[2, m] = h[1, m, 0] - h[0, m, 1]
    s = np.einsum("lmn,nm->nl", du, alpha)
    return u, s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", default="1e5")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--sample", type=int, default=300)
    ap.add_argument("--orders", default=str(pv.DEFAULT_ORDER))
    ap.add_argument("--eps", default="1e-4,1e-6,1e-8")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    import fmm3dpy  # after OMP_NUM_THREADS is set by the caller

    n = int(float(args.n))
    x, alpha, sigma = pv.particles(n, 1)
    rng = np.random.default_rng(7)
    idx = rng.choice(n, args.sample, replace=False)
    ug, sg = direct_sum(x, alpha, sigma, targets=x[idx], target_strength=alpha[idx])
    ref = fmm3dpy.l3ddir(sources=np.ascontiguousarray(x.T), charges=np.ascontiguousarray(alpha.T),
                         targets=np.ascontiguousarray(x[idx].T), pgt=3, nd=3)
    us, ss = curl_and_stretching(ref.gradtarg, ref.hesstarg, alpha[idx])
    omp = os.environ.get("OMP_NUM_THREADS", "all")
    print(f"# N = {n}, sample {args.sample}, pyvortex threads {args.threads or 'all'}, "
          f"fmm3dpy OMP_NUM_THREADS {omp}")
    print("code,parameter,seconds,velocity_error,stretching_error")
    for p in (int(o) for o in args.orders.split(",")):
        best = 1e30
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            u, s = pv.evaluate(x, alpha, sigma, order=p, threads=args.threads, backend="cpu")
            best = min(best, time.perf_counter() - t0)
        print(f"pyvortex,p={p},{best:.3f},{rel_l2(u[idx], ug):.2e},{rel_l2(s[idx], sg):.2e}",
              flush=True)
    for eps in (float(e) for e in args.eps.split(",")):
        best = 1e30
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            u, s = fmm3d_fields(fmm3dpy, eps, x, alpha)
            best = min(best, time.perf_counter() - t0)
        print(f"fmm3dpy,eps={eps:g},{best:.3f},{rel_l2(u[idx], us):.2e},{rel_l2(s[idx], ss):.2e}",
              flush=True)


if __name__ == "__main__":
    main()

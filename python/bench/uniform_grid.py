#!/usr/bin/env python3
"""pyvortex on the GPU uniform grid against `vortex eval --grid uniform` (BENCHMARKS.md).

For each N: the standard set of `vortex particles`, `vortex eval --grid uniform --backend cuda`
(`timing.json` "total": the engine's time of the evaluation the binary reports, sort to the
fields in input order; the process start, the file I/O and the kernel compilation are not in
it) and `pyvortex.evaluate(..., grid="uniform", backend="cuda")` on the same particles: the
wall time of the Python call (argument conversion, the planner and its crowding measure, the
engine opened on the process's device and evaluated, numpy outputs) and the engine's own
"total". The first Python call compiles the kernels and is reported apart; then each side runs
`--repeat` times, interleaved, and the smallest times are compared. The figure of the issue:
the Python wall time within 1.3x of the command line's total at N = 1e6.

    python3 python/bench/uniform_grid.py --n 1e6 [--bin target/release/vortex] [--repeat 5]
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

import numpy as np

import pyvortex as pv
from standard_set import write_standard_set

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", default="1e6")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "vortex"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--order", type=int, default=pv.DEFAULT_ORDER)
    args = ap.parse_args()
    env = {**os.environ, "RUST_LOG": "warn"}
    print("N,p,cli_total_s,python_first_wall_s,python_wall_s,python_engine_total_s,"
          "ratio_python_wall_to_cli,engine,velocity_rel_diff_python_vs_cli")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(float(s)) for s in args.n.split(",")):
            p, x, alpha, sigma = write_standard_set(args.bin, n, tmp, env)
            kw = dict(grid="uniform", backend="cuda", order=args.order, return_times=True)
            t0 = time.perf_counter()
            pv.evaluate(x, alpha, sigma, **kw)
            first = time.perf_counter() - t0
            cli, wall, eng = [], [], []
            out = os.path.join(tmp, "out")
            for _ in range(args.repeat):
                subprocess.run([args.bin, "eval", "--particles", p, "--out", out, "--overwrite",
                                "--grid", "uniform", "--backend", "cuda", "--order",
                                str(args.order)], check=True, env=env)
                cli.append(json.load(open(os.path.join(out, "timing.json")))["total"])
                t0 = time.perf_counter()
                u, _, times = pv.evaluate(x, alpha, sigma, **kw)
                wall.append(time.perf_counter() - t0)
                eng.append(times["total"])
            d = rel_l2(u, np.load(os.path.join(out, "velocity.npy")))
            c, w = min(cli), min(wall)
            print(f"{n},{args.order},{c:.4f},{first:.4f},{w:.4f},{min(eng):.4f},{w / c:.2f},"
                  f"{times['engine']},{d:.1e}", flush=True)


if __name__ == "__main__":
    main()

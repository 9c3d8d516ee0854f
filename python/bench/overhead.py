#!/usr/bin/env python3
"""Overhead of the Python call over the command line's evaluation (BENCHMARKS.md).

For each N: writes the standard set with `vortex particles`, runs `vortex eval` (its
`timing.json` "total" is the evaluation time the binary reports: tree, lists, all phases,
scatter to input order) and `pyvortex.evaluate` on the same particles (wall time of the Python
call: argument conversion, GIL release, pool, the engine, numpy outputs). Each side is run
`--repeat` times, interleaved, and the smallest time of each is compared.

    python3 python/bench/overhead.py --n 1e5,1e6 [--bin target/release/vortex] [--repeat 3]
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", default="1e5,1e6")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "vortex"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    env = {**os.environ, "RUST_LOG": "warn"}
    thr = [] if args.threads is None else ["--threads", str(args.threads)]
    print("N,cli_total_s,python_wall_s,python_engine_total_s,overhead_percent,bitwise_equal")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(float(s)) for s in args.n.split(",")):
            p, x, alpha, sigma = write_standard_set(args.bin, n, tmp, env)
            cli, wall, eng = [], [], []
            for _ in range(args.repeat):
                out = os.path.join(tmp, "out")
                subprocess.run([args.bin, "eval", "--particles", p, "--out", out,
                                "--backend", "cpu", *thr], check=True, env=env)
                cli.append(json.load(open(os.path.join(out, "timing.json")))["total"])
                t0 = time.perf_counter()
                u, s, times = pv.evaluate(x, alpha, sigma, backend="cpu", threads=args.threads,
                                          return_times=True)
                wall.append(time.perf_counter() - t0)
                eng.append(times["total"])
            same = bool(np.array_equal(u, np.load(os.path.join(out, "velocity.npy")))
                        and np.array_equal(s, np.load(os.path.join(out, "stretching.npy"))))
            c, w = min(cli), min(wall)
            print(f"{n},{c:.4f},{w:.4f},{min(eng):.4f},{100 * (w / c - 1):+.2f},{same}",
                  flush=True)


if __name__ == "__main__":
    main()

"""The standard particle set of the benchmarks, written by the `vortex` binary."""
import os
import subprocess

import numpy as np


def write_standard_set(binary, n, tmp, env):
    """`vortex particles --n N --seed 1` written to TMP/p.npy: the file and its columns
    (positions, strengths, core radii) as contiguous arrays."""
    p = os.path.join(tmp, "p.npy")
    subprocess.run([binary, "particles", "--n", str(n), "--seed", "1", "--out", p],
                   check=True, env=env)
    a = np.load(p)
    return p, a[:, :3].copy(), a[:, 3:6].copy(), a[:, 6].copy()

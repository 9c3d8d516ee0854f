"""Reads the particle snapshots of `vortex run` (`.vtp`, or the `.pvtp` of an MPI run with its
per-rank pieces) and compares two of them: the same particles, in any order, to a relative
tolerance (docs/CONVENTIONS.md, "Files").

Usage: python3 snapshot_pieces.py A.(p)vtp B.(p)vtp [TOL]
"""
import os
import re
import sys

import numpy as np


def read_vtp(path):
    """The appended arrays of one `.vtp` piece: {name: array (n, components)}."""
    data = open(path, "rb").read()
    start = data.index(b"\n_") + 2
    head = data[:start].decode()
    out = {}
    for line in head.splitlines():
        if not line.startswith("<DataArray"):
            continue
        get = lambda k: re.search(k + r'="([^"]*)"', line).group(1)
        at = start + int(get("offset"))
        size = int(np.frombuffer(data, "<u8", 1, at)[0])
        ty = {"Float64": "<f8", "Int64": "<i8"}[get("type")]
        comps = int(get("NumberOfComponents"))
        out[get("Name")] = np.frombuffer(data, ty, size // 8, at + 8).reshape(-1, comps)
    return out


def read(path):
    """The particle rows (position, alpha, |alpha|, sigma, velocity) of a `.vtp` or `.pvtp`."""
    if path.endswith(".pvtp"):
        text = open(path).read()
        pieces = re.findall(r'Source="([^"]*)"', text)
        parts = [read(os.path.join(os.path.dirname(path), p)) for p in pieces]
        return np.concatenate(parts) if parts else np.zeros((0, 9))
    a = read_vtp(path)
    return np.hstack([a["Points"], a["alpha"], a["alpha_magnitude"], a["sigma"], a["velocity"]])


def same_particles(a, b, tol):
    """Largest difference of the rows sorted by position, relative to each column's scale."""
    assert a.shape == b.shape, (a.shape, b.shape)
    a = a[np.lexsort(a[:, 2::-1].T)]
    b = b[np.lexsort(b[:, 2::-1].T)]
    scale = np.maximum(np.abs(a).max(axis=0), 1e-300)
    worst = (np.abs(a - b) / scale).max() if len(a) else 0.0
    assert worst <= tol, worst
    return worst


if __name__ == "__main__":
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    a, b = read(sys.argv[1]), read(sys.argv[2])
    worst = same_particles(a, b, tol)
    print(f"  {sys.argv[2]}: {len(a)} particles, largest relative difference {worst:.2e}")

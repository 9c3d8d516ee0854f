"""Shared helpers of the pyvortex tests: the vortex binary, the numpy direct sum."""
import os
import subprocess

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture(scope="session")
def vortex_bin():
    """The `vortex` binary of this checkout ($VORTEX_BIN, else target/release/vortex)."""
    tdir = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    exe = os.environ.get("VORTEX_BIN", os.path.join(tdir, "release", "vortex"))
    if not os.path.exists(exe):
        pytest.fail(f"the vortex binary {exe} is missing: `cargo build --release` first "
                    "(or set VORTEX_BIN)")
    return exe


@pytest.fixture(scope="session")
def ranks_run_bin():
    """The example `ranks_run` of vortex-method (`vortex run --backend cpu` on simulated ranks:
    $VORTEX_RANKS_RUN, else target/release/examples/ranks_run)."""
    tdir = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    exe = os.environ.get("VORTEX_RANKS_RUN",
                         os.path.join(tdir, "release", "examples", "ranks_run"))
    if not os.path.exists(exe):
        pytest.fail(f"{exe} is missing: `cargo build --release -p vortex-method --example "
                    "ranks_run` first (or set VORTEX_RANKS_RUN)")
    return exe


def run_cli(exe, *args, cwd=ROOT):
    p = subprocess.run([exe, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                       env={**os.environ, "RUST_LOG": "warn"})
    if p.returncode != 0:
        raise AssertionError(f"{exe} {' '.join(map(str, args))} failed:\n{p.stderr}")
    return p


from pyvortex.reference import direct_sum, rel_l2  # noqa: E402,F401  (numpy, engine-free)

RNG = np.random.default_rng()


def fresh_set(n):
    """A new random set every run (uniform in [-pi, pi]^3, the standard strengths and cores)."""
    x = RNG.uniform(-np.pi, np.pi, (n, 3))
    alpha = RNG.uniform(0, 1.0 / n, (n, 3))
    sigma = np.full(n, 2 * np.pi / n ** (1 / 3)) * RNG.uniform(0.8, 1.2, n)
    return x, alpha, sigma

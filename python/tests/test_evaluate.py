"""The evaluator from numpy: against an independent numpy direct sum (N = 500), bitwise against
the command line on the standard, ring and periodic sets, and the errors of bad input."""
import os

import numpy as np
import pytest

import pyvortex as pv
from conftest import RNG, direct_sum, fresh_set, rel_l2, run_cli


def test_against_a_numpy_direct_sum_n500():
    x, alpha, sigma = fresh_set(500)
    u_ref, s_ref = direct_sum(x, alpha, sigma)
    u, s = pv.evaluate(x, alpha, sigma, method="direct", backend="cpu")
    assert rel_l2(u, u_ref) < 1e-12 and rel_l2(s, s_ref) < 1e-12
    # the fast methods at their defaults: the accuracy README.md states for the FMM (< 1e-4)
    for method in ("fmm", "treecode"):
        u, s = pv.evaluate(x, alpha, sigma, method=method, leaf_size=16, backend="cpu")
        assert rel_l2(u, u_ref) < 1e-5, (method, rel_l2(u, u_ref))
        assert rel_l2(s, s_ref) < 1e-4, (method, rel_l2(s, s_ref))


def test_targets_get_velocity_only():
    x, alpha, sigma = fresh_set(500)
    t = RNG.uniform(-4, 4, (123, 3))
    u_ref, _ = direct_sum(x, alpha, sigma, targets=t)
    u, s = pv.evaluate(x, alpha, sigma, targets=t, backend="cpu")
    assert s is None and u.shape == (123, 3)
    assert rel_l2(u, u_ref) < 1e-5


def test_thread_count_and_layout_do_not_change_the_numbers():
    x, alpha, sigma = fresh_set(3000)
    u1, s1 = pv.evaluate(x, alpha, sigma, threads=1, backend="cpu")
    u2, s2 = pv.evaluate(x, alpha, sigma, threads=2, backend="cpu")
    assert np.array_equal(u1, u2) and np.array_equal(s1, s2)
    # a Fortran-ordered (copied) input and a list give the same numbers as the C-ordered one
    u3, s3 = pv.evaluate(np.asfortranarray(x), alpha.tolist(), sigma, backend="cpu")
    assert np.array_equal(u1, u3) and np.array_equal(s1, s3)


def test_times_and_backend_are_reported():
    x, alpha, sigma = fresh_set(1000)
    _, _, times = pv.evaluate(x, alpha, sigma, return_times=True)
    assert times["total"] > 0 and isinstance(times["backend"], str)


@pytest.mark.parametrize("dist,periodic", [("uniform", False), ("ring", False), ("uniform", True)])
def test_bitwise_equal_to_the_command_line(tmp_path, vortex_bin, dist, periodic):
    n, seed = 4000, int(RNG.integers(1, 1 << 30))
    p = tmp_path / "p.npy"
    extra = ["--periodic"] if periodic else []
    run_cli(vortex_bin, "particles", "--n", n, "--seed", seed, "--distribution", dist,
            "--out", p, *extra)
    x, alpha, sigma = pv.particles(n, seed, periodic=periodic, distribution=dist)
    a = np.load(p)
    assert np.array_equal(a, np.hstack([x, alpha, sigma[:, None]]))
    run_cli(vortex_bin, "eval", "--particles", p, "--out", tmp_path / "out", "--backend", "cpu",
            *extra)
    u, s = pv.evaluate(x, alpha, sigma, periodic=periodic, backend="cpu")
    assert np.array_equal(u, np.load(tmp_path / "out" / "velocity.npy"))
    assert np.array_equal(s, np.load(tmp_path / "out" / "stretching.npy"))


def test_bad_input_raises_the_messages_of_the_command_line(tmp_path, vortex_bin):
    x, alpha, sigma = fresh_set(50)
    bad = x.copy()
    bad[7, 2] = np.nan
    with pytest.raises(ValueError, match=r"^x: row 7, column 2 is NaN \(values must be finite\)$"):
        pv.evaluate(bad, alpha, sigma)
    # the same message from the command line, for the same values in a particle file
    f = tmp_path / "bad.npy"
    np.save(f, np.hstack([bad, alpha, sigma[:, None]]))
    p = run_cli_fails(vortex_bin, "eval", "--particles", f, "--out", tmp_path / "o")
    assert f"particle file {f}: row 7, column 2 is NaN (values must be finite)" in p
    s2 = sigma.copy()
    s2[4] = -0.5
    with pytest.raises(ValueError, match=r"^sigma: row 4: core radius sigma is -0.5 but must be positive$"):
        pv.evaluate(x, alpha, s2)
    s2[4] = 0.0
    with pytest.raises(ValueError, match="sigma: row 4: core radius sigma is 0 but must be positive"):
        pv.evaluate(x, alpha, s2)
    with pytest.raises(ValueError, match=r"x: shape \(50, 2\) but \(50, 3\) expected"):
        pv.evaluate(x[:, :2], alpha, sigma)
    with pytest.raises(ValueError, match=r"alpha: shape \(49, 3\) but \(50, 3\) expected"):
        pv.evaluate(x, alpha[:49], sigma)
    with pytest.raises(ValueError, match=r"sigma: shape \(50, 1\) but \(50,\) expected"):
        pv.evaluate(x, alpha, sigma[:, None])
    with pytest.raises(ValueError, match=r"x: contains no rows"):
        pv.evaluate(x[:0], alpha[:0], sigma[:0])
    with pytest.raises(ValueError, match=r"targets: row 0, column 0 is inf"):
        pv.evaluate(x, alpha, sigma, targets=np.full((2, 3), np.inf))
    with pytest.raises(ValueError, match=r"expansion order p = 0 is out of range"):
        pv.evaluate(x, alpha, sigma, order=0)
    with pytest.raises(ValueError, match=r"theta = 1.5"):
        pv.evaluate(x, alpha, sigma, theta=1.5)
    with pytest.raises(ValueError, match="threads must be at least 1"):
        pv.evaluate(x, alpha, sigma, threads=0)
    with pytest.raises(ValueError, match="backend 'gpu'"):
        pv.evaluate(x, alpha, sigma, backend="gpu")
    with pytest.raises(ValueError):
        pv.evaluate(x, alpha, sigma, method="multipole")
    with pytest.raises(ValueError):  # periodic: the total strength must be zero
        pv.evaluate(x, alpha, sigma, periodic=True)
    with pytest.raises(ValueError, match="n must be at least 1"):
        pv.particles(0)
    with pytest.raises(ValueError):
        pv.particles(10, distribution="sphere")


def test_cuda_without_a_gpu_is_a_runtime_error():
    x, alpha, sigma = fresh_set(100)
    _, _, times = pv.evaluate(x, alpha, sigma, return_times=True)
    if " on cpu" in times["backend"]:  # "adaptive octree on cpu (T threads)": no GPU here
        with pytest.raises(RuntimeError, match="backend cuda"):
            pv.evaluate(x, alpha, sigma, backend="cuda")
    else:  # a GPU is here: backend="cuda" runs, close to the f64 CPU path (fp32 kernels)
        u, _ = pv.evaluate(x, alpha, sigma, backend="cuda")
        u_ref, _ = pv.evaluate(x, alpha, sigma, backend="cpu")
        assert rel_l2(u, u_ref) < 1e-4


def run_cli_fails(exe, *args):
    import subprocess

    p = subprocess.run([exe, *map(str, args)], capture_output=True, text=True,
                       env={**os.environ, "RUST_LOG": "warn"})
    assert p.returncode != 0
    return p.stderr

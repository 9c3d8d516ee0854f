"""`evaluate(..., grid=...)` as `vortex eval --grid`: the planner's choice and its reasons in
the times dict, the CPU path (grid auto is the octree there, bitwise the command line's), and
the refusals of the uniform grid with the planner's reason naming the argument.

The uniform grid itself runs on a GPU only: `test_grid_gpu.py` checks it there."""
import json

import numpy as np
import pytest

import pyvortex as pv
from conftest import RNG, fresh_set, run_cli


def clustered_set(n=20_000):
    """Five tight clumps in the cube: a uniform grid's leaves would hold them whole (about 200
    cells of the crowding measure at this N, five of them full: crowding ~40)."""
    centres = RNG.uniform(-np.pi, np.pi, (5, 3))
    x = centres[RNG.integers(0, 5, n)] + RNG.normal(0, 0.05, (n, 3))
    alpha = RNG.uniform(0, 1.0 / n, (n, 3))
    return x, alpha, np.full(n, 0.02)


def test_auto_on_the_cpu_is_the_octree_and_says_why(tmp_path, vortex_bin):
    n = 3000
    x, alpha, sigma = fresh_set(n)
    u, s, t = pv.evaluate(x, alpha, sigma, backend="cpu", grid="auto", return_times=True)
    assert t["engine"] == "Adaptive(Cpu)"
    reasons = " | ".join(t["planner"])
    assert "backend cpu" in reasons and "grid auto" in reasons and "GPU only" in reasons, reasons
    ua, sa, ta = pv.evaluate(x, alpha, sigma, backend="cpu", grid="adaptive", return_times=True)
    assert np.array_equal(u, ua) and np.array_equal(s, sa)
    assert not any("grid auto" in r for r in ta["planner"])
    # the command line makes the same choice, says the same in timing.json, gives the same numbers
    p = tmp_path / "p.npy"
    np.save(p, np.hstack([x, alpha, sigma[:, None]]))
    run_cli(vortex_bin, "eval", "--particles", p, "--out", tmp_path / "o", "--backend", "cpu",
            "--grid", "auto")
    timing = json.loads((tmp_path / "o" / "timing.json").read_text())
    assert timing["engine"] == t["engine"] and timing["planner"] == t["planner"]
    assert np.array_equal(u, np.load(tmp_path / "o" / "velocity.npy"))
    assert np.array_equal(s, np.load(tmp_path / "o" / "stretching.npy"))


def test_auto_keeps_a_clustered_set_on_the_octree_and_says_so():
    x, alpha, sigma = clustered_set()
    _, _, t = pv.evaluate(x, alpha, sigma, grid="auto", return_times=True)
    assert t["engine"] in ("Adaptive(Cpu)", "Adaptive(Cuda)")
    assert any("clustered" in r for r in t["planner"]), t["planner"]


def test_uniform_refusals_name_the_argument_and_the_reason():
    x, alpha, sigma = fresh_set(2000)
    # what no machine runs: a ValueError, whatever the machine
    with pytest.raises(ValueError, match=r'^grid="uniform": .*separate targets') as e:
        pv.evaluate(x, alpha, sigma, targets=x[:10], grid="uniform")
    assert "grid adaptive" in str(e.value)
    with pytest.raises(ValueError, match=r'^grid="uniform": .*FMM only, not the treecode'):
        pv.evaluate(x, alpha, sigma, method="treecode", grid="uniform")
    with pytest.raises(ValueError, match=r'^grid="uniform": .*GPU only and the backend is the CPU'):
        pv.evaluate(x, alpha, sigma, backend="cpu", grid="uniform")
    cx, ca, cs = clustered_set()
    with pytest.raises(ValueError, match=r'^grid="uniform": .*clustered: a uniform grid\'s near '
                                         r'field would do [0-9.]+ times the pair work') as e:
        pv.evaluate(cx, ca, cs, grid="uniform")
    # the measured figure is far above the limit (the clumps hold every particle)
    figure = float(str(e.value).split("would do ")[1].split(" ")[0])
    assert figure > 10, str(e.value)
    with pytest.raises(ValueError, match="unknown grid 'octree' \\(expected auto, adaptive or uniform\\)"):
        pv.evaluate(x, alpha, sigma, grid="octree")


def test_uniform_without_a_gpu_is_a_runtime_error_with_the_reason():
    x, alpha, sigma = fresh_set(2000)
    _, _, t = pv.evaluate(x, alpha, sigma, grid="auto", return_times=True)
    if t["engine"] != "Adaptive(Cpu)":
        pytest.skip(f"not run: a GPU is here ({t['backend']}); test_grid_gpu.py checks the grid")
    with pytest.raises(RuntimeError, match=r'^grid="uniform": .*GPU only'):
        pv.evaluate(x, alpha, sigma, grid="uniform")
    with pytest.raises(RuntimeError, match=r'^backend="cuda": .*no usable GPU'):
        pv.evaluate(x, alpha, sigma, backend="cuda", grid="uniform")

"""Readers and plots on tiny runs of both solvers produced here by the `vortex` binary."""
import numpy as np
import pytest

import pyvortex as pv
from conftest import run_cli

VORTEX_TOML = """
nu = 0.01
dt = 0.05
t_end = 0.1
[domain]
periodic = true
box_length = 6.283185307179586
image_levels = 2
[evaluation]
method = "fmm"
order = 6
theta = 0.5
[initial]
kind = "taylor-green"
n = 8
overlap = 1.0
[reinterpolation]
strain = 0.0
[output]
diagnostics_every = 1
grid = 8
progress = false
plots = false
"""

SPECTRAL_TOML = """
n = 8
nu = 0.01
t_end = 0.1
dt = 0.01
diagnostics_interval = 0.05
spectrum_times = [0.0, 0.1]
field_times = []
checkpoint_interval = 0.1
threads = 1
[initial]
kind = "taylor-green"
amplitude = 1.0
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory, vortex_bin):
    d = tmp_path_factory.mktemp("runs")
    (d / "v.toml").write_text(VORTEX_TOML)
    (d / "s.toml").write_text(SPECTRAL_TOML)
    run_cli(vortex_bin, "run", d / "v.toml", "--out", d / "v", "--backend", "cpu",
            "--threads", "2")
    run_cli(vortex_bin, "spectral", d / "s.toml", "--out", d / "s", "--backend", "cpu",
            "--no-progress")
    return d / "v", d / "s"


def test_spectral_run_and_checkpoint_agree(runs):
    run = pv.load_run(runs[1])
    assert run.solver == "spectral" and run.timings is None
    assert np.allclose(run.t, [0.0, 0.05, 0.1], atol=1e-12)
    # Taylor-Green, amplitude 1: E(0) = 1/8 and Z(0) = 3/8
    assert abs(run.diagnostics["energy"][0] - 0.125) < 1e-12
    assert abs(run.diagnostics["enstrophy"][0] - 0.375) < 1e-12
    ck = pv.read_checkpoint(run.checkpoint)
    assert ck["solver"] == "spectral" and ck["n"] == 8 and abs(ck["t"] - 0.1) < 1e-12
    u = ck["velocity"]
    assert u.shape == (3, 8, 8, 8) and ck["velocity_hat"].shape == (3, 8, 8, 5)
    e = 0.5 * np.mean((u * u).sum(0))
    assert abs(e / run.diagnostics["energy"][-1] - 1) < 1e-10
    # the spectra at the written times; their sum is the energy (Parseval)
    assert sorted(run.spectra) == pytest.approx([0.0, 0.1])
    for t, s in run.spectra.items():
        i = int(np.argmin(abs(run.t - t)))
        assert abs(s["E"].sum() / run.diagnostics["energy"][i] - 1) < 1e-8


def test_vortex_run_checkpoint_and_an_evaluation_agree(runs):
    run = pv.load_run(runs[0])
    assert run.solver == "vortex" and run.config["dt"] == 0.05
    assert np.allclose(run.t, [0.0, 0.05, 0.1], atol=1e-12)
    assert len(run.timings) == 2 and (run.timings["step"] == [1, 2]).all()
    assert sorted(run.spectra) == pytest.approx([0.0, 0.05, 0.1])
    ck = pv.read_checkpoint(run.checkpoint)
    assert ck["solver"] == "vortex" and ck["step"] == 2 and abs(ck["t"] - 0.1) < 1e-12
    n = ck["position"].shape[0]
    assert n == 512 and ck["strength"].shape == (n, 3) and (ck["sigma"] > 0).all()
    assert ck["previous_velocity"].shape == (n, 3)
    # the energy of the last diagnostics row, recomputed from the checkpoint's particles with
    # the package's evaluator on the diagnostics grid (8^3 points -pi + 2 pi i / 8)
    g = -np.pi + 2 * np.pi * np.arange(8) / 8
    grid = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
    u, s = pv.evaluate(ck["position"], ck["strength"], ck["sigma"], targets=grid,
                       periodic=True, image_levels=2, order=6, theta=0.5, backend="cpu")
    assert s is None
    e = 0.5 * np.mean((u * u).sum(1))
    assert abs(e / run.diagnostics["energy"][-1] - 1) < 1e-6, (e, run.diagnostics["energy"])


def test_plots(runs, tmp_path):
    matplotlib = pytest.importorskip("matplotlib", reason="plots need matplotlib (optional)")
    matplotlib.use("Agg")
    v, s = pv.load_run(runs[0]), pv.load_run(runs[1])
    axes = pv.plot_energy([v, s], labels=["vortex", "spectral"])
    assert len(axes[0].lines) == 2 and len(axes[1].lines) == 2
    ax = s.plot_spectra()
    assert len(ax.lines) == len(s.spectra) + 1
    f = tmp_path / "e.png"
    axes[0].figure.savefig(f)
    assert f.stat().st_size > 1000


def test_reader_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        pv.load_run(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match="neither diagnostics.csv"):
        pv.load_run(tmp_path)
    with pytest.raises(FileNotFoundError):
        pv.read_checkpoint(tmp_path / "missing.bin")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"VXSPECCK" + bytes(40))
    with pytest.raises(ValueError, match="junk.bin"):
        pv.read_checkpoint(junk)
    junk.write_bytes(b"something else entirely")
    with pytest.raises(ValueError, match="neither a vortex-method nor a spectral checkpoint"):
        pv.read_checkpoint(junk)

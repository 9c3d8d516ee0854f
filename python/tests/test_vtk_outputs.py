"""Every kind of file a run writes, read by VTK's own readers (the `vtk` wheel: what ParaView
is built on) and compared with the values the run's checkpoints hold.

* `particles_STEP.vtp` (vtkXMLPolyDataReader): points, alpha, sigma equal to the checkpoint of
  that step (f64, to 1e-12 relative: in fact bit for bit), |alpha| to its norm, the velocity
  to `pyvortex.evaluate` of the checkpoint's particles with the run's parameters;
* `particles.pvd` (VTK's XML parser, vtkXMLDataParser: VTK has no reader of its own for this
  ParaView collection): every entry a file VTK reads, at the time of its step;
* `particles_STEP.pvtp` of an MPI run and its per-rank pieces (vtkXMLPPolyDataReader): all
  particles of the checkpoint, each once;
* `particles_STEP.vtk` (legacy ASCII, vtkPolyDataReader): to the 11 significant digits the
  text keeps;
* `grid_STEP.vtk` (legacy binary STRUCTURED_POINTS, vtkStructuredPointsReader): the grid
  velocity equal to `pyvortex.evaluate` of the checkpoint's particles at VTK's own grid points,
  the vorticity and Q to those numpy computes from that velocity;
* `fields_T.vtk` of `vortex spectral`: the velocity equal to the checkpoint's at that time.
"""
import glob
import os
import shutil
import subprocess
import tomllib

import numpy as np
import pytest

import pyvortex as pv
from conftest import run_cli

vtk = pytest.importorskip("vtk", reason="not run: the vtk wheel is not installed (pip install vtk)")
from vtkmodules.util.numpy_support import vtk_to_numpy  # noqa: E402

TG8 = """nu = 0.05
dt = 0.05
t_end = 0.2
[domain]
periodic = true
box_length = 6.283185307179586
image_levels = 2
[evaluation]
method = "fmm"
order = 6
theta = 0.5
backend = "cpu"
[initial]
kind = "taylor-green"
n = 8
[reinterpolation]
ratio = 1.2
[output]
diagnostics_every = 2
grid = 8
grid_velocity = "fmm"
snapshot_every = 2
snapshot_format = "{fmt}"
checkpoint_every = 2
checkpoints_kept = 4
progress = false
plots = false
"""


def rel(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def run_vortex(exe, tmp, fmt, launcher=()):
    cfg = tmp / f"tg8-{fmt}.toml"
    cfg.write_text(TG8.format(fmt=fmt))
    out = tmp / f"run-{fmt}{'-mpi' if launcher else ''}"
    if launcher:
        p = subprocess.run([*launcher, exe, "run", str(cfg), "--out", str(out)],
                           capture_output=True, text=True,
                           env={**os.environ, "RUST_LOG": "warn", "RAYON_NUM_THREADS": "1"})
        assert p.returncode == 0, p.stderr
    else:
        run_cli(exe, "run", cfg, "--out", out)
    return out


def checkpoints(out):
    """{step: checkpoint dict} of every checkpoint kept in `out`."""
    cks = {}
    for f in glob.glob(str(out / "checkpoint.bin*")):
        d = pv.read_checkpoint(f)
        cks[d["step"]] = d
    return cks


def run_params(out):
    """The evaluation parameters of the run (its config.toml) as `pyvortex.evaluate` keywords."""
    with open(out / "config.toml", "rb") as f:
        c = tomllib.load(f)
    e, dom = c["evaluation"], c["domain"]
    return dict(method=e["method"], order=e["order"], theta=e["theta"],
                leaf_size=e["leaf_size"], core_cutoff=e["core_cutoff"], periodic=True,
                box_length=dom["box_length"], image_levels=dom["image_levels"], backend="cpu",
                grid="adaptive")


def read_polydata(path):
    """Points and point arrays of a `.vtp`, `.pvtp` or legacy `.vtk` polydata, by VTK."""
    if path.endswith(".pvtp"):
        r = vtk.vtkXMLPPolyDataReader()
    elif path.endswith(".vtp"):
        r = vtk.vtkXMLPolyDataReader()
    else:
        r = vtk.vtkPolyDataReader()
        # every SCALARS and VECTORS section, as ParaView reads them (VTK's default: the first)
        r.ReadAllScalarsOn()
        r.ReadAllVectorsOn()
    r.SetFileName(path)
    r.Update()
    if hasattr(r, "GetErrorCode"):
        assert r.GetErrorCode() == 0, f"VTK could not read {path}"
    poly = r.GetOutput()
    assert poly.GetNumberOfPoints() > 0, f"VTK read no points from {path}"
    pd = poly.GetPointData()
    arrays = {pd.GetArrayName(i): vtk_to_numpy(pd.GetArray(i)) for i in range(pd.GetNumberOfArrays())}
    verts = poly.GetNumberOfVerts()
    return vtk_to_numpy(poly.GetPoints().GetData()), arrays, verts


def check_particles(points, arrays, verts, ck, tol, velocity=None, vtol=None):
    """The arrays of one snapshot against the checkpoint of its step (same order)."""
    n = len(ck["position"])
    assert points.shape == (n, 3) and verts == n
    assert rel(points, ck["position"]) <= tol
    assert rel(arrays["alpha"], ck["strength"]) <= tol
    assert rel(arrays["sigma"].reshape(-1), ck["sigma"]) <= tol
    assert rel(arrays["alpha_magnitude"].reshape(-1),
               np.linalg.norm(ck["strength"], axis=1)) <= tol
    if velocity is not None:
        assert rel(arrays["velocity"], velocity) <= vtol, rel(arrays["velocity"], velocity)


@pytest.fixture(scope="module")
def vtp_run(tmp_path_factory, vortex_bin):
    return run_vortex(vortex_bin, tmp_path_factory.mktemp("vtk"), "vtp")


def test_vtp_snapshots_and_the_pvd_series_are_the_checkpoints(vtp_run):
    out = vtp_run
    cks = checkpoints(out)
    params = run_params(out)
    parser = vtk.vtkXMLDataParser()
    parser.SetFileName(str(out / "particles.pvd"))
    assert parser.Parse() == 1, "VTK's XML parser refuses particles.pvd"
    root = parser.GetRootElement()
    assert root.GetName() == "VTKFile" and root.GetAttribute("type") == "Collection"
    coll = root.FindNestedElementWithName("Collection")
    entries = [coll.GetNestedElement(i) for i in range(coll.GetNumberOfNestedElements())]
    assert [e.GetName() for e in entries] == ["DataSet"] * len(entries)
    compared = 0
    steps = []
    for e in entries:
        f, t = e.GetAttribute("file"), float(e.GetAttribute("timestep"))
        step = int(f.split("_")[1].split(".")[0])
        steps.append(step)
        assert abs(t - step * 0.05) <= 1e-12, (f, t)
        points, arrays, verts = read_polydata(str(out / f))
        if step in cks:
            ck = cks[step]
            u, _ = pv.evaluate(ck["position"], ck["strength"], ck["sigma"], **params)
            check_particles(points, arrays, verts, ck, 1e-12, u, 1e-12)
            compared += 1
    assert steps == sorted(steps) and steps[-1] == 4
    assert compared >= 2, f"snapshots at steps {steps}, checkpoints at {sorted(cks)}"


def numpy_vorticity_and_q(u, length):
    """Vorticity and Q = -(1/2) u_ij u_ji of a periodic velocity u[c, i, j, k] (x = i) by numpy's
    FFT with the solver's wavenumbers (real-to-complex along z; the Nyquist index n/2 is -n/2
    along x and y and +n/2 along z, `vortex_spectral::field::wavevector`)."""
    n = u.shape[1]
    kxy = np.fft.fftfreq(n, 1.0 / n)
    kz = np.fft.rfftfreq(n, 1.0 / n)
    kk = [a * 2 * np.pi / length for a in np.meshgrid(kxy, kxy, kz, indexing="ij")]
    uh = np.fft.rfftn(u, axes=(1, 2, 3))
    # grad[c, j] = d u_c / d x_j
    grad = np.stack([np.fft.irfftn(1j * kk[j] * uh, s=(n, n, n), axes=(1, 2, 3))
                     for j in range(3)], axis=1)
    w = np.stack([grad[2, 1] - grad[1, 2], grad[0, 2] - grad[2, 0], grad[1, 0] - grad[0, 1]])
    q = -0.5 * np.einsum("ij...,ji...->...", grad, grad)
    return w, q


def read_grid(path):
    """Point arrays of a legacy STRUCTURED_POINTS file as [c, i, j, k] (x = i), by VTK, and its
    points (n^3, 3) in VTK's order."""
    r = vtk.vtkStructuredPointsReader()
    r.SetFileName(path)
    r.ReadAllVectorsOn()
    r.ReadAllScalarsOn()
    r.Update()
    img = r.GetOutput()
    n = img.GetDimensions()[0]
    assert img.GetDimensions() == (n, n, n)
    pts = np.array([img.GetPoint(p) for p in range(n ** 3)])
    pd = img.GetPointData()
    out = {}
    for i in range(pd.GetNumberOfArrays()):
        a = vtk_to_numpy(pd.GetArray(i)).reshape(n, n, n, -1)  # [k, j, i, c]: x fastest
        out[pd.GetArrayName(i)] = np.transpose(a, (3, 2, 1, 0))
    return n, pts, out


def test_grid_files_are_the_fields_of_the_checkpoint(vtp_run):
    out = vtp_run
    cks = checkpoints(out)
    params = run_params(out)
    grids = sorted(glob.glob(str(out / "grid_*.vtk")))
    compared = 0
    for g in grids:
        step = int(os.path.basename(g)[5:11])
        if step not in cks:
            continue
        n, pts, a = read_grid(g)
        assert set(a) >= {"velocity", "vorticity", "omega_magnitude", "Q"}, set(a)
        ck = cks[step]
        u, _ = pv.evaluate(ck["position"], ck["strength"], ck["sigma"], targets=pts, **params)
        # VTK's points: x fastest -> [c, i, j, k]
        u = np.transpose(u.reshape(n, n, n, 3), (3, 2, 1, 0))
        assert rel(a["velocity"], u) <= 1e-12, rel(a["velocity"], u)
        w, q = numpy_vorticity_and_q(a["velocity"], 2 * np.pi)
        assert rel(a["vorticity"], w) <= 1e-10, rel(a["vorticity"], w)
        assert rel(a["Q"][0], q) <= 1e-10, rel(a["Q"][0], q)
        assert rel(a["omega_magnitude"][0], np.linalg.norm(a["vorticity"], axis=0)) <= 1e-12
        compared += 1
    assert compared >= 2, f"grid files {grids}, checkpoints at {sorted(cks)}"


def test_legacy_vtk_snapshots_to_the_digits_of_the_text(tmp_path, vortex_bin):
    out = run_vortex(vortex_bin, tmp_path, "vtk")
    cks = checkpoints(out)
    params = run_params(out)
    compared = 0
    for f in sorted(glob.glob(str(out / "particles_*.vtk"))):
        step = int(os.path.basename(f)[10:16])
        if step in cks:
            points, arrays, verts = read_polydata(f)
            ck = cks[step]
            u, _ = pv.evaluate(ck["position"], ck["strength"], ck["sigma"], **params)
            # `{:.10e}`: 11 significant digits, half a unit of the last one relative
            check_particles(points, arrays, verts, ck, 5e-11, u, 5e-11)
            compared += 1
    assert compared >= 2


def test_spectral_field_files_are_the_checkpoint(tmp_path, vortex_bin):
    cfg = tmp_path / "s.toml"
    cfg.write_text("n = 16\nnu = 0.05\nt_end = 0.1\ndt = 0.01\nfield_times = [0.0, 0.1]\n"
                   "field_formats = [\"vtk\", \"npy\"]\ncheckpoint_interval = 0.1\n"
                   "backend = \"cpu\"\n[initial]\nkind = \"isotropic\"\nk_peak = 3.0\n"
                   "energy = 0.5\nseed = 5\n")
    run_cli(vortex_bin, "spectral", cfg, "--out", tmp_path / "s", "--no-progress")
    ck = pv.read_checkpoint(tmp_path / "s" / "checkpoint.bin")
    assert abs(ck["t"] - 0.1) < 1e-12
    f = tmp_path / "s" / "fields_00000.1000.vtk"
    n, pts, a = read_grid(str(f))
    assert n == 16 and rel(a["velocity"], ck["velocity"]) <= 1e-12
    # the grid of the checkpoint: -pi + 2 pi i / n
    h = 2 * np.pi / n
    assert np.allclose(pts[1], [-np.pi + h, -np.pi, -np.pi], rtol=0, atol=1e-12)


@pytest.mark.skipif(not os.environ.get("VORTEX_MPI_BIN") or not shutil.which("mpirun"),
                    reason="not run: needs mpirun and VORTEX_MPI_BIN (a vortex built with "
                           "--features mpi); .ci/run sets both")
def test_pvtp_of_an_mpi_run_holds_every_particle_of_the_checkpoint(tmp_path):
    exe = os.environ["VORTEX_MPI_BIN"]
    out = run_vortex(exe, tmp_path, "vtp", ["mpirun", "--oversubscribe", "-np", "2"])
    cks = checkpoints(out)
    params = run_params(out)
    files = sorted(glob.glob(str(out / "particles_*.pvtp")))
    assert files, f"no .pvtp in {os.listdir(out)}"
    compared = 0
    for f in files:
        step = int(os.path.basename(f)[10:16])
        pieces = sorted(glob.glob(str(out / f"particles_{step:06d}_p*.vtp")))
        assert len(pieces) == 2, pieces
        if step not in cks:
            continue
        points, arrays, verts = read_polydata(f)
        ck = cks[step]
        # the pieces hold each rank's particles: the same rows in another order
        a = np.lexsort(points.T[::-1])
        b = np.lexsort(ck["position"].T[::-1])
        sorted_ck = {"position": ck["position"][b], "strength": ck["strength"][b],
                     "sigma": ck["sigma"][b]}
        sorted_arrays = {k: v[a] for k, v in arrays.items()}
        u, _ = pv.evaluate(ck["position"], ck["strength"], ck["sigma"], **params)
        # the distributed FMM against one rank: round-off (README: results independent of R)
        check_particles(points[a], sorted_arrays, verts, sorted_ck, 1e-12, u[b], 1e-10)
        compared += 1
    assert compared >= 2

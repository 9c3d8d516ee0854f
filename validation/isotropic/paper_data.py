"""The data of the core paper's Section 5.1 reproduction (decaying isotropic turbulence at 256^3,
vortex method against the pseudo-spectral solver): the derived run configurations, the readers
of the run outputs, the blob-filter arithmetic and the second invariant of the velocity
gradient. Standard library and numpy only (numpy imported where a function needs it), so that
`paper_report.py configs` and `paper_report.py collect` run on a GPU node without matplotlib.

Formulas:
- The Gaussian core of the core paper (Eq. 2-3, `zeta(rho) = (2 pi)^(-3/2) exp(-rho^2 / 2)`,
  `rho = r / sigma`) has the Fourier transform `G(k) = exp(-k^2 sigma^2 / 2)`; a velocity
  smoothed by it has the energy spectrum `E(k) exp(-k^2 sigma^2)` (the blob filter). The
  Gaussian-based cores of order 4 and 6 (`evaluation.core`, crates/fmm/src/kernel/cores.rs)
  have `G(k) = exp(-x) sum_{j<m} x^j / j!`, `x = k^2 sigma^2 / 2`, `m = order / 2`, and the
  blob filter `G(k)^2`.
- The second invariant of the velocity gradient, `II = u_{i,j} u_{j,i}` (`Q = -II / 2`, the
  `Q` written by `vortex run` into `grid_STEP.vtk`), from spectral derivatives on the periodic
  grid; the Nyquist planes are left out, as the vortex run's grid velocity leaves them out.
"""
import csv
import json
import math
import os
import re
import tomllib

# Section 5.1 compares the solvers at these multiples of the initial eddy turnover time T.
TIMES_OVER_T = (1, 3, 6, 10)
# T = L / u' of the shipped initial field (vortex_spectral::initial::isotropic(256, k_peak = 4,
# Re_lambda = 100, seed = 2024, nu = 0.005)): the first row of the spectral run's energy.csv.
T_256 = 0.6124529893
# The core paper's run: 1000 steps of 256^3 particles in 4120 s on 64 GeForce 8800 GT.
SEED_STEPS, SEED_SECONDS, SEED_GPUS = 1000, 4120.0, 64


def comparison_times(turnover, dt, multiples=TIMES_OVER_T):
    """The first time step at or after each `m T` (vortex steps are multiples of `dt`)."""
    return [round(math.ceil(m * turnover / dt - 1e-9) * dt, 9) for m in multiples]


# ---------------------------------------------------------------------------------------------
# configurations


def toml_value(v):
    """A TOML literal for a number, string, bool or list of them."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, float):
        return repr(v)
    return str(v)


def set_key(text, section, key, value):
    """`text` (TOML) with `key` of `[section]` (None: the top level) set to `value`: the key's
    line replaced, or a line added at the end of the section."""
    lines = text.split("\n")
    current, last_in_section, found = None, None, None
    first_header = None
    for i, line in enumerate(lines):
        s = line.strip()
        m = re.match(r"^\[([^\[\]]+)\]$", s)
        if m:
            current = m.group(1).strip()
            if first_header is None:
                first_header = i
            if current == section:
                last_in_section = i
            continue
        if current == section:
            if s and not s.startswith("#"):
                last_in_section = i
            if re.match(rf"^{re.escape(key)}\s*=", s):
                found = i
    new = f"{key} = {toml_value(value)}"
    if found is not None:
        lines[found] = new
    elif section is None:
        at = first_header if first_header is not None else len(lines)
        while at > 0 and not lines[at - 1].strip():
            at -= 1
        lines.insert(at, new)
    elif last_in_section is not None:
        lines.insert(last_in_section + 1, new)
    else:
        lines += [f"[{section}]", new]
    return "\n".join(lines)


def lookup(doc, section, key):
    return (doc if section is None else doc[section])[key]


def derive(text, changes, name):
    """`text` with every `(section, key, value)` of `changes` set; checked by parsing it back."""
    for section, key, value in changes:
        text = set_key(text, section, key, value)
    doc = tomllib.loads(text)
    for section, key, value in changes:
        got = lookup(doc, section, key)
        if got != value and not (isinstance(value, tuple) and list(value) == got):
            raise ValueError(f"{name}: {section}.{key} = {got!r} after the change, not {value!r}")
    return text


def paper_configs(vortex_text, spectral_text, turnover, test_size=None):
    """The two configurations of the reproduction from the shipped ones: the same physics and
    numerics, `t_end` at the first vortex step at or after t/T = 10, the outputs of the figures
    (vortex: a diagnostics row with its spectrum at the first step at or after each multiple of T,
    the grid velocity at the first and the last step; spectral: spectra at those times, the
    velocity at t = 0 and t_end). `test_size`: a small test of the pipeline (n^3, no checkpoints,
    the resolved flow of validation/isotropic/README.md at that size: nu = 0.02, Re_lambda = 20).
    Returns (vortex text, spectral text, the comparison times)."""
    vdoc = tomllib.loads(vortex_text)
    dt = float(vdoc["dt"])
    times = comparison_times(turnover, dt)
    t_end = times[-1]
    vchanges = [
        (None, "t_end", t_end),
        ("output", "diagnostics_interval", turnover),
        # > the number of steps: particle and grid snapshots only at the first and last step
        ("output", "snapshot_every", 1000000),
        # the grid velocity at t = 0 checks the alignment of the two solvers' grids
        ("output", "snapshot_initial", True),
        ("output", "spectra", True),
        ("output", "progress", False),
        # the grid velocity of the device-resident run (its only one), also on the host
        ("output", "grid_velocity", "vorticity"),
    ]
    schanges = [
        ("t_end", t_end),
        ("spectrum_times", [0.0] + times),
        ("field_times", [0.0, t_end]),
        ("field_formats", ["npy"]),
    ]
    schanges = [(None, k, v) for k, v in schanges]
    if test_size:
        vchanges += [
            ("initial", "n", test_size),
            ("output", "grid", test_size),
            ("output", "checkpoint_every", 0),
            (None, "nu", 0.02),
            ("initial", "re_lambda", 20.0),
        ]
        schanges += [(None, "n", test_size), (None, "checkpoint_interval", 100.0),
                     (None, "nu", 0.02), ("initial", "re_lambda", 20.0)]
    return (derive(vortex_text, vchanges, "vortex configuration"),
            derive(spectral_text, schanges, "spectral configuration"), times)


# ---------------------------------------------------------------------------------------------
# readers


def read_rows(path):
    """A numeric CSV with a header as a list of dicts."""
    with open(path) as f:
        return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]


def read_spectrum(path):
    """`(k, E)` columns of a spectrum CSV as two lists."""
    rows = read_rows(path)
    return [r["k"] for r in rows], [r["E"] for r in rows]


def files_by_key(run_dir, pattern, key):
    """{key(match): path} of the files of `run_dir` whose names match `pattern` (one group)."""
    out = {}
    for name in os.listdir(run_dir):
        m = re.match(pattern, name)
        if m:
            out[key(m.group(1))] = os.path.join(run_dir, name)
    return out


def spectrum_files(run_dir):
    """{t: path} of the `spectrum_TTTTT.TTTT.csv` files of a run directory."""
    return files_by_key(run_dir, r"^spectrum_(\d+\.\d+)\.csv$", float)


def at_time(table, t, tol=1e-6):
    """The entry of `{time: x}` at time `t`, or None."""
    for key, v in table.items():
        if abs(key - t) <= tol:
            return v
    return None


def interp(rows, t, key):
    """Linear interpolation of column `key` of time-sorted `rows` at `t` (NaN outside)."""
    ts = [r["t"] for r in rows]
    for i in range(len(ts)):
        if abs(ts[i] - t) <= 1e-9:
            return rows[i][key]
        if ts[i] > t:
            if i == 0:
                return math.nan
            a, b = rows[i - 1], rows[i]
            w = (t - a["t"]) / (b["t"] - a["t"])
            return (1 - w) * a[key] + w * b[key]
    return math.nan


def read_vtk_fields(path, names):
    """The named point fields of a legacy binary STRUCTURED_POINTS file as written by `vortex
    run` (`grid_STEP.vtk`: big-endian doubles, x fastest): {name: array [x, y, z] or [x, y, z, 3]}
    plus `n`, `spacing` and `title`."""
    import numpy as np

    out = {}
    with open(path, "rb") as f:
        f.readline()
        out["title"] = f.readline().decode().strip()
        if f.readline().strip() != b"BINARY":
            raise ValueError(f"{path}: not a binary legacy VTK file")
        npts = None
        while npts is None:
            line = f.readline()
            if not line:
                raise ValueError(f"{path}: no POINT_DATA")
            w = line.decode().split()
            if w and w[0] == "DIMENSIONS":
                dims = [int(x) for x in w[1:4]]
            elif w and w[0] == "SPACING":
                out["spacing"] = float(w[1])
            elif w and w[0] == "POINT_DATA":
                npts = int(w[1])
        n = dims[0]
        if dims != [n, n, n] or npts != n ** 3:
            raise ValueError(f"{path}: expected an n^3 grid, got {dims}, {npts} points")
        out["n"] = n
        while True:
            line = f.readline()
            if not line:
                break
            w = line.decode().split()
            if not w:
                continue
            if w[0] not in ("VECTORS", "SCALARS"):
                raise ValueError(f"{path}: unexpected line {line[:60]!r}")
            comps = 3 if w[0] == "VECTORS" else 1
            if w[0] == "SCALARS":
                f.readline()  # LOOKUP_TABLE default
            nbytes = 8 * comps * npts
            if w[1] in names:
                a = np.frombuffer(f.read(nbytes), dtype=">f8").astype(np.float64)
                shape = (n, n, n, 3) if comps == 3 else (n, n, n)
                # file order z, y, x (x fastest) -> [x, y, z]
                a = a.reshape(shape)
                out[w[1]] = np.ascontiguousarray(a.transpose((2, 1, 0, 3) if comps == 3
                                                             else (2, 1, 0)))
            else:
                f.seek(nbytes, os.SEEK_CUR)
    missing = [x for x in names if x not in out]
    if missing:
        raise ValueError(f"{path}: no field {', '.join(missing)}")
    return out


def vtk_time(title):
    """The time in a `grid_STEP.vtk` title (`vortex method, step S, t = T`)."""
    m = re.search(r"t = ([-+0-9.eE]+)", title)
    if not m:
        raise ValueError(f"no time in the VTK title {title!r}")
    return float(m.group(1))


def grid_files(run_dir):
    """{step: path} of the vortex run's `grid_STEP.vtk` files."""
    return files_by_key(run_dir, r"^grid_(\d+)\.vtk$", int)


def velocity_files(run_dir):
    """{t: path} of the spectral run's `velocity_TTTTT.TTTT.npy` files."""
    return files_by_key(run_dir, r"^velocity_(\d+\.\d+)\.npy$", float)


# ---------------------------------------------------------------------------------------------
# arithmetic


def core_transform(x, order=2):
    """The Fourier transform of the core of order `order` (2, 4, 6) at `x = k^2 sigma^2 / 2`:
    `exp(-x) sum_{j < order/2} x^j / j!`."""
    return math.exp(-x) * sum(x ** j / math.factorial(j) for j in range(order // 2))


def blob_filter(k, sigma, order=2):
    """The energy-spectrum filter of the core of order `order` and radius `sigma`: the square of
    its transform (`exp(-k^2 sigma^2)` for the Gaussian)."""
    if order == 2:
        return [math.exp(-(x * sigma) ** 2) for x in k]
    return [core_transform(0.5 * (x * sigma) ** 2, order) ** 2 for x in k]


def core_order(vortex_config):
    """`evaluation.core` of a parsed vortex configuration (2 when absent: the Gaussian)."""
    return int(vortex_config.get("evaluation", {}).get("core", 2))


def gap_share(k, e_vortex, e_spectral, sigma, k_lo, k_hi):
    """The share of the log-spectrum gap `ln(E_spectral / E_vortex)` over `k_lo < k <= k_hi`
    that the blob filter accounts for: `sum k^2 sigma^2 / sum ln(E_s / E_v)`. 1: the smoothing
    is the whole gap; None where the vortex spectrum is not below the spectral one."""
    num = den = 0.0
    for x, ev, es in zip(k, e_vortex, e_spectral):
        if k_lo < x <= k_hi + 1e-9 and ev > 0 and es > 0:
            num += (x * sigma) ** 2
            den += math.log(es / ev)
    return num / den if den > 0 else None


def max_rel_diff(k, e_a, e_b, k_hi, k_lo=0.5):
    """`max |E_a / E_b - 1|` over `k_lo <= k <= k_hi` (with E_b > 0) and the k where it is."""
    worst, where = 0.0, None
    for x, a, b in zip(k, e_a, e_b):
        if k_lo <= x <= k_hi + 1e-9 and b > 0:
            d = abs(a / b - 1.0)
            if d > worst:
                worst, where = d, x
    return worst, where


def wavenumbers(n, length):
    """Physical wavenumbers of the half-spectrum grid (rfftn layout), Nyquist planes marked."""
    import numpy as np

    ks = 2.0 * np.pi / length
    k = np.fft.fftfreq(n, 1.0 / n)
    kz = np.fft.rfftfreq(n, 1.0 / n)
    nyq = (np.abs(k) == n // 2)[:, None, None] | (np.abs(k) == n // 2)[None, :, None] \
        | (kz == n // 2)[None, None, :]
    return ks * k[:, None, None], ks * k[None, :, None], ks * kz[None, None, :], nyq


def second_invariant(u, length, sigma=None, nyquist=False):
    """`II = u_{i,j} u_{j,i}` of the velocity `u` [x, y, z, 3] on the periodic n^3 grid of the box
    of length `length`, by spectral derivatives (the Nyquist planes left out unless `nyquist`:
    then the derivatives of `vortex run`'s `Q`); with `sigma` the velocity first smoothed by the
    Gaussian core, `u_hat exp(-k^2 sigma^2 / 2)`."""
    import numpy as np

    n = u.shape[0]
    kx, ky, kz, nyq = wavenumbers(n, length)
    kvec = (kx, ky, kz)
    weight = np.where(nyq & (not nyquist), 0.0, 1.0)
    if sigma:
        weight = weight * np.exp(-0.5 * sigma ** 2 * (kx ** 2 + ky ** 2 + kz ** 2))
    uh = [np.fft.rfftn(u[..., c], axes=(0, 1, 2)) * weight for c in range(3)]
    grad = [[np.fft.irfftn(1j * kvec[j] * uh[i], s=(n, n, n), axes=(0, 1, 2)) for j in range(3)]
            for i in range(3)]
    return sum(grad[i][j] * grad[j][i] for i in range(3) for j in range(3))


def field_stats(a, b):
    """Relative L2 difference `|a - b| / |b|` and the correlation coefficient of two fields."""
    import numpy as np

    d = float(np.linalg.norm(a - b) / np.linalg.norm(b))
    c = float(np.corrcoef(a.ravel(), b.ravel())[0, 1])
    return {"rel_l2": d, "correlation": c}

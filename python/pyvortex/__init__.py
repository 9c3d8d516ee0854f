"""pyvortex: the vortex-particle FMM evaluator and the run outputs of the ``vortex`` solvers.

Velocity and stretching of Gaussian vortex elements (Biot-Savart, ``CONVENTIONS.md`` of the
repository; Yokota et al., Comput. Phys. Commun. 180 (2009), Eq. 3-9) are computed by the same
Rust engine and the same entry point as ``vortex eval`` (bitwise the same numbers on the CPU
backend); the CUDA backend is used when a GPU is found (``backend="auto"``).

    >>> import pyvortex as pv
    >>> x, alpha, sigma = pv.particles(100_000, seed=1)
    >>> u, s = pv.evaluate(x, alpha, sigma)              # FMM, p = 8, theta = 0.55
    >>> run = pv.load_run("runs/out/vortex-taylor-green-16")
    >>> pv.plot_energy(run); pv.plot_spectra(run)

Readers: :func:`load_run` (diagnostics, timings, spectra, configuration of a ``vortex run`` or
``vortex spectral`` output directory) and :func:`read_checkpoint` (both solvers, through their
Rust readers). Plotting needs matplotlib (optional).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Union

import numpy as np

from . import _native
from ._native import (
    DEFAULT_BOX_LENGTH,
    DEFAULT_IMAGE_LEVELS,
    DEFAULT_LEAF_SIZE,
    DEFAULT_ORDER,
    DEFAULT_THETA,
)
from .plot import plot_energy, plot_spectra
from .runs import Run, load_run, read_csv

__version__ = _native.__version__

__all__ = [
    "evaluate",
    "particles",
    "read_checkpoint",
    "load_run",
    "read_csv",
    "Run",
    "plot_energy",
    "plot_spectra",
    "DEFAULT_ORDER",
    "DEFAULT_THETA",
    "DEFAULT_LEAF_SIZE",
    "DEFAULT_BOX_LENGTH",
    "DEFAULT_IMAGE_LEVELS",
]


def _f64(a: Any) -> np.ndarray:
    # no copy for a float64 array (the engine reads its buffer in place)
    return np.asarray(a, dtype=np.float64)


def evaluate(
    x: Any,
    alpha: Any,
    sigma: Any,
    *,
    targets: Any = None,
    method: str = "fmm",
    order: int = DEFAULT_ORDER,
    theta: float = DEFAULT_THETA,
    leaf_size: int = DEFAULT_LEAF_SIZE,
    core_cutoff: Optional[float] = None,
    periodic: bool = False,
    box_length: float = DEFAULT_BOX_LENGTH,
    image_levels: int = DEFAULT_IMAGE_LEVELS,
    backend: str = "auto",
    grid: str = "auto",
    device: int = 0,
    threads: Optional[int] = None,
    return_times: bool = False,
) -> Union[
    Tuple[np.ndarray, Optional[np.ndarray]],
    Tuple[np.ndarray, Optional[np.ndarray], Dict[str, Any]],
]:
    """Velocity and stretching of vortex elements, as ``vortex eval`` computes them.

    Parameters
    ----------
    x : (N, 3) float64 array
        Positions.
    alpha : (N, 3) float64 array
        Vector strengths (vorticity times volume).
    sigma : (N,) float64 array
        Gaussian core radii (positive).
    targets : (M, 3) float64 array, optional
        Evaluate the velocity at these points instead of at the elements (plain points carry
        no strength: the stretching is then ``None``).
    method : {"fmm", "treecode", "ppm", "direct"}
        ``direct`` is the O(N^2) f64 reference sum.
    order : int
        Expansion order p (1..20); default ``DEFAULT_ORDER`` (8) as ``vortex eval``.
    theta : float
        Opening angle of the multipole acceptance criterion, in (0, 1).
    leaf_size : int
        Largest number of elements in a leaf cell.
    core_cutoff : float, optional
        Minimum gap of a far interaction, in source core radii (engine default when None).
    periodic : bool
        Sum over the periodic images of the box ``[-L/2, L/2)^3`` (the total strength must be
        zero; positions are wrapped).
    box_length : float
        The box length L.
    image_levels : int
        Levels of periodic images above the root.
    backend : {"auto", "cpu", "cuda"}
        ``auto`` takes the GPU when one is usable, as the binary does.
    grid : {"auto", "adaptive", "uniform"}
        As ``vortex eval --grid``. ``uniform``: the FMM on a uniform grid sorted and evaluated
        on the GPU (the fast path for nearly even sets, free space or periodic, at the elements
        themselves); ``adaptive``: the octree built on the host (every method, backend, target
        kind and clustering); ``auto``: the uniform grid where it runs, else the octree. The
        planner's choice and its reasons are in the ``times`` dict (``return_times=True``:
        ``engine``, ``planner``).
    device : int
        GPU index among the visible devices.
    threads : int, optional
        CPU threads of the evaluation (a local pool; all cores when None). The results do not
        depend on it.
    return_times : bool
        Also return a dict of the phase times (seconds; ``total`` is what ``vortex eval``
        writes to ``timing.json``), the engine that ran (``backend``: in words; ``engine``:
        ``UniformGrid``, ``Adaptive(Cpu)``, ``Adaptive(Cuda)``, ``Direct``) and the planner's
        reasons for it (``planner``: a list of str).

    Returns
    -------
    velocity : (M, 3) float64 array
    stretching : (M, 3) float64 array or None
        ``(alpha_i . grad) u`` at each element; None with ``targets``.
    times : dict, only with ``return_times=True``

    Raises
    ------
    ValueError
        Bad shapes, non-finite values, sigma <= 0, parameters out of range (the messages of
        ``vortex eval``, naming the array, the row and the value); ``grid="uniform"`` for what
        the uniform grid does not evaluate (separate ``targets``, a method other than the FMM,
        ``backend="cpu"``, a clustered set), with the planner's reason.
    RuntimeError
        ``backend="cuda"`` or ``grid="uniform"`` without a usable GPU (the planner's reason),
        or a device failure.
    """
    t = None if targets is None else _f64(targets)
    u, s, times = _native.evaluate(
        _f64(x), _f64(alpha), _f64(sigma), t, method, order, theta, leaf_size, core_cutoff,
        periodic, box_length, image_levels, backend, grid, device, threads,
    )
    if return_times:
        return u, s, times
    return u, s


def particles(
    n: int, seed: int = 1, periodic: bool = False, distribution: str = "uniform"
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A reproducible test particle set, the one ``vortex particles`` writes.

    ``uniform`` is the standard set (uniform in [-pi, pi]^3, strengths in [0, 1/N),
    sigma = 2 pi / N^(1/3)); ``ring`` a vortex ring; ``clumps`` a clustered set.
    ``periodic=True`` subtracts the mean strength (zero total circulation).

    Returns ``(x, alpha, sigma)``: (N, 3), (N, 3) and (N,) float64 arrays.
    """
    return _native.particles(int(n), int(seed), bool(periodic), distribution)


def read_checkpoint(path) -> dict:
    """A checkpoint of ``vortex run`` or ``vortex spectral`` as a dict.

    ``path``: a ``checkpoint.bin`` (or a kept older copy), the ``checkpoint.manifest`` of a run
    on several ranks (or a kept older copy), or a run's output directory (its current
    checkpoint). Read by the solvers' own Rust readers (format version and checksum checked);
    the pieces of a manifest are checked against it (length, checksum, step, particle count;
    a missing or corrupt piece is refused naming it) and the whole state assembled in
    global-id order, as one rank would have written it.

    vortex: ``solver="vortex"``, ``step``, ``dt``, ``t``, ``position``, ``strength`` (N, 3),
    ``sigma``, ``sigma0`` (N,), ``previous_velocity``/``previous_stretching`` (N, 3 or None:
    the Adams-Bashforth history), ``step_reset``, ``reinterpolations``, ``initial_energy``,
    ``config`` (the configuration it continues, ``key = value`` lines).

    spectral: ``solver="spectral"``, ``n``, ``nu``, ``dealias``, ``t``, ``step``,
    ``velocity`` (3, n, n, n) on the grid ``-pi + 2 pi i / n`` (z fastest) and
    ``velocity_hat`` (3, n, n, n//2 + 1) complex Fourier coefficients.

    Raises ``FileNotFoundError`` for a missing file or directory, ``ValueError`` for anything
    else that is not a readable checkpoint.
    """
    import os

    p = os.fspath(path)
    if not os.path.exists(p):
        raise FileNotFoundError(f"checkpoint {p} does not exist")
    d = _native.read_checkpoint(p)
    if d["solver"] == "spectral":
        d["velocity_hat"] = d.pop("velocity_hat_re_im").view(np.complex128)[..., 0]
    return d

"""Reading the output directory of ``vortex run`` or ``vortex spectral``.

``vortex run`` writes ``config.toml``, ``diagnostics.csv`` (one row per diagnostics step),
``timing.csv`` (seconds of each phase of every step), ``spectrum_TTTTT.TTTT.csv`` (periodic
runs; T the time, ``spectrum_STEP.csv`` in older runs) and ``checkpoint.bin``; ``vortex spectral``
writes ``energy.csv``, ``spectrum_TTTTT.TTTT.csv`` and ``checkpoint.bin``. CSV files have a header row (``CONVENTIONS.md``, "Files").
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

import numpy as np


def read_csv(path: str) -> np.ndarray:
    """A CSV file with a header row as a numpy structured array (one field per column)."""
    with open(path) as f:
        head = f.readline().strip().split(",")
    if not head or head == [""]:
        raise ValueError(f"{path}: empty file (a header row was expected)")
    a = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    if a.size and a.shape[1] != len(head):
        raise ValueError(f"{path}: {a.shape[1]} columns but the header names {len(head)}")
    dt = np.dtype([(h, np.float64) for h in head])
    out = np.zeros(a.shape[0], dtype=dt)
    for i, h in enumerate(head):
        out[h] = a[:, i]
    return out


def _read_toml(path: str) -> Dict[str, Any]:
    try:
        import tomllib  # Python >= 3.11
    except ImportError:  # pragma: no cover
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            return {"_text": open(path).read()}
    with open(path, "rb") as f:
        return tomllib.load(f)


@dataclass
class Run:
    """The outputs of one run.

    Attributes
    ----------
    path : the output directory.
    solver : ``"vortex"`` or ``"spectral"``.
    diagnostics : structured array, one row per output time (fields ``t``, ``energy``,
        ``enstrophy``, ...: the columns of ``diagnostics.csv`` or ``energy.csv``).
    timings : structured array of ``timing.csv`` (vortex runs), else None.
    spectra : ``{t: structured array with fields k, E}``, sorted by time.
    config : the ``config.toml`` of the run as a dict (None when absent).
    checkpoint : the run's checkpoint (None when absent): ``checkpoint.bin`` (one rank, and
        ``vortex spectral``), ``checkpoint.manifest`` (several ranks: a manifest and one piece
        per rank), or the directory itself when it holds both (a run continued on another number
        of ranks; :func:`pyvortex.read_checkpoint` then reads the later one). Read it with
        :func:`pyvortex.read_checkpoint`.
    """

    path: str
    solver: str
    diagnostics: np.ndarray
    timings: Optional[np.ndarray] = None
    spectra: Dict[float, np.ndarray] = field(default_factory=dict)
    config: Optional[Dict[str, Any]] = None
    checkpoint: Optional[str] = None

    @property
    def t(self) -> np.ndarray:
        """Times of the diagnostics rows."""
        return self.diagnostics["t"]

    def spectrum_at(self, t: float) -> np.ndarray:
        """The spectrum written nearest to time ``t``."""
        if not self.spectra:
            raise ValueError(f"{self.path}: no spectrum_*.csv in this run")
        return self.spectra[min(self.spectra, key=lambda s: abs(s - t))]

    def plot_energy(self, **kw):
        """Energy and enstrophy against time (see :func:`pyvortex.plot_energy`)."""
        from .plot import plot_energy

        return plot_energy(self, **kw)

    def plot_spectra(self, **kw):
        """Energy spectra (see :func:`pyvortex.plot_spectra`)."""
        from .plot import plot_spectra

        return plot_spectra(self, **kw)


def load_run(path) -> Run:
    """Reads the output directory of ``vortex run`` or ``vortex spectral``.

    Raises ``FileNotFoundError`` when the directory or its diagnostics file is missing.
    """
    d = os.fspath(path)
    if not os.path.isdir(d):
        raise FileNotFoundError(f"run directory {d} does not exist")
    vortex_csv = os.path.join(d, "diagnostics.csv")
    spectral_csv = os.path.join(d, "energy.csv")
    if os.path.exists(vortex_csv):
        solver, diag_path = "vortex", vortex_csv
    elif os.path.exists(spectral_csv):
        solver, diag_path = "spectral", spectral_csv
    else:
        raise FileNotFoundError(
            f"{d}: neither diagnostics.csv (vortex run) nor energy.csv (vortex spectral)"
        )
    cfg_path = os.path.join(d, "config.toml")
    config = _read_toml(cfg_path) if os.path.exists(cfg_path) else None
    timing_path = os.path.join(d, "timing.csv")
    timings = read_csv(timing_path) if os.path.exists(timing_path) else None
    spectra: Dict[float, np.ndarray] = {}
    for f in glob.glob(os.path.join(d, "spectrum_*.csv")):
        tag = os.path.basename(f)[len("spectrum_"):-len(".csv")]
        if "." not in tag:
            # spectrum_STEP.csv of vortex runs before both solvers named spectra by the time:
            # the time is STEP * dt of the configuration
            dt = (config or {}).get("dt")
            if dt is None:
                raise ValueError(f"{f}: the step needs dt from {cfg_path}, which is missing")
            t = int(tag) * float(dt)
        else:
            t = float(tag)
        spectra[t] = read_csv(f)
    single = os.path.join(d, "checkpoint.bin")
    manifest = os.path.join(d, "checkpoint.manifest")
    have = [p for p in (single, manifest) if os.path.exists(p)]
    ck = have[0] if len(have) == 1 else (d if have else None)
    return Run(
        path=d,
        solver=solver,
        diagnostics=read_csv(diag_path),
        timings=timings,
        spectra=dict(sorted(spectra.items())),
        config=config,
        checkpoint=ck,
    )

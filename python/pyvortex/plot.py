"""Plots of run outputs (matplotlib, an optional dependency): energy and enstrophy against time
and energy spectra ``E(k)`` with a ``k^(-5/3)`` guide, as fluidsim's ``spatial_means`` and
``spectra`` plots."""
from __future__ import annotations

from typing import Iterable, Optional, Sequence, Union


def _plt():
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover
        raise ImportError("plotting needs matplotlib: pip install matplotlib") from e
    return plt


def _runs(runs) -> list:
    """One run (anything with ``diagnostics``, e.g. a :class:`pyvortex.Run`) or several, as a
    list. Duck-typed so that this module does not import :mod:`pyvortex.runs` (which imports it)."""
    return [runs] if hasattr(runs, "diagnostics") else list(runs)


def plot_energy(runs, labels: Optional[Sequence[str]] = None, axes=None):
    """Energy ``E = <|u|^2>/2`` and enstrophy ``Z = <|omega|^2>/2`` against time, one line per
    run (a :class:`pyvortex.Run` or several). Returns the two matplotlib axes."""
    plt = _plt()
    rs = _runs(runs)
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10, 4))
    for i, r in enumerate(rs):
        lab = labels[i] if labels else f"{r.solver}: {r.path}"
        axes[0].plot(r.t, r.diagnostics["energy"], label=lab)
        axes[1].plot(r.t, r.diagnostics["enstrophy"], label=lab)
    axes[0].set(xlabel="t", ylabel="E", title="kinetic energy")
    axes[1].set(xlabel="t", ylabel="Z", title="enstrophy")
    axes[0].legend(fontsize=8)
    return axes


def plot_spectra(
    run,
    times: Optional[Iterable[float]] = None,
    ax=None,
    slope: Union[bool, float] = True,
):
    """Energy spectra ``E(k)`` of a run on log-log axes, at the written times nearest to
    ``times`` (all when None), with a ``k^(-5/3)`` guide when ``slope``. Returns the axes."""
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 4.5))
    ts = list(run.spectra) if times is None else [
        min(run.spectra, key=lambda s: abs(s - t)) for t in times
    ]
    top = 0.0
    for t in ts:
        s = run.spectra[t]
        keep = (s["k"] > 0) & (s["E"] > 0)
        ax.loglog(s["k"][keep], s["E"][keep], label=f"t = {t:g}")
        if keep.any():
            top = max(top, float(s["E"][keep].max()))
    if slope and ts and top > 0:
        import numpy as np

        k = np.array([1.0, 10.0])
        ax.loglog(k, top * k ** (-5.0 / 3.0), "k:", label="$k^{-5/3}$")
    ax.set(xlabel="k", ylabel="E(k)", title=f"spectra: {run.path}")
    ax.legend(fontsize=8)
    return ax

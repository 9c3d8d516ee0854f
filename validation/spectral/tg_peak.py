#!/usr/bin/env python3
"""Peak dissipation of Taylor-Green Re=1600 runs (energy.csv of `vortex spectral`).

usage: tg_peak.py energy.csv [more.csv ...]
Prints the peak of epsilon = 2 nu Z (enstrophy based, column `dissipation`) and of -dE/dt
(centred differences of column `energy`), with their times. Standard library only.
"""
import csv
import sys

for path in sys.argv[1:]:
    rows = list(csv.DictReader(open(path)))
    t = [float(r["t"]) for r in rows]
    e = [float(r["energy"]) for r in rows]
    d = [float(r["dissipation"]) for r in rows]
    i = max(range(len(d)), key=lambda j: d[j])
    rate = [(-(e[j + 1] - e[j - 1]) / (t[j + 1] - t[j - 1]), t[j]) for j in range(1, len(t) - 1)]
    r, tr = max(rate)
    print(f"{path}: peak 2nuZ = {d[i]:.5f} at t = {t[i]:.2f}; peak -dE/dt = {r:.5f} at t = {tr:.2f}; E(t=10) = "
          + next((f"{e[j]:.5f}" for j in range(len(t)) if abs(t[j] - 10) < 1e-6), "n/a"))

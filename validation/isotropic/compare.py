#!/usr/bin/env python3
"""Vortex method against the pseudo-spectral solver: options on decaying isotropic turbulence
(64^3, Re_lambda 20 and 40) and long-time stability on Taylor-Green; writes README.md.

Reads the histories kept in results/ (t, energy, enstrophy per diagnostics row of each run, the
spectra at t = 4) and writes the tables of README.md. With --runs DIR it reads the run output
directories `DIR/<name>/diagnostics.csv` (vortex) and `DIR/<name>/energy.csv` (spectral) instead,
so the same script reports a fresh set of runs; --check only verifies that every table can be
built (used by CI on a tiny pair of runs).
"""
import argparse
import bisect
import csv
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# (name, Re_lambda, overlap sigma0/h, re-interpolation, what it is)
ISO_OPTIONS = [
    ("v20_base", 20, 1.0, "core ratio 1.2", "shipped settings of 509a78d"),
    ("v20_s1", 20, 1.0, "ratio 1.2 + strain 1.0", "strain criterion"),
    ("v20_o09", 20, 0.9, "ratio 1.2 + strain 1.0", "overlap 0.9"),
    ("v20_o08", 20, 0.8, "ratio 1.2 + strain 1.0", "overlap 0.8 (chosen)"),
    ("v20_o06", 20, 0.6, "ratio 1.2 + strain 1.0", "overlap 0.6"),
    ("v20_o05", 20, 0.5, "ratio 1.2 + strain 1.0", "overlap 0.5"),
    ("v40_base", 40, 1.0, "core ratio 1.2", "shipped settings of 509a78d"),
    ("v40_s1", 40, 1.0, "ratio 1.2 + strain 1.0", "strain criterion"),
    ("v40_o08", 40, 0.8, "ratio 1.2 + strain 1.0", "overlap 0.8 (chosen)"),
    ("v40_o06", 40, 0.6, "ratio 1.2 + strain 1.0", "overlap 0.6"),
]
TIMES_T = [0.3, 1.0, 3.0, 6.0]
# initial eddy turnover time T = L / u' of the spectral run (energy.csv, first row)
STABILITY = [
    ("tg16_base", "spectral-tg100-64", "Taylor-Green Re 100, 16^3, to t = 20", "ratio 1.2 (shipped)"),
    ("tg16_s05", "spectral-tg100-64", "Taylor-Green Re 100, 16^3, to t = 20", "ratio 1.2 + strain 0.5"),
    ("tg32_base", "spectral-tg100-64", "Taylor-Green Re 100, 32^3, to t = 10", "ratio 1.2 (shipped)"),
    ("tg32_s05", "spectral-tg100-64", "Taylor-Green Re 100, 32^3, to t = 10", "ratio 1.2 + strain 0.5"),
    ("tg32_o08_s05", "spectral-tg100-64", "Taylor-Green Re 100, 32^3, to t = 10", "overlap 0.8, strain 0.5"),
    ("tg1600_64", "spectral-tg1600-64", "Taylor-Green Re 1600, 64^3, to t = 12", "overlap 0.8, strain 1.0"),
]


def read_rows(path):
    with open(path) as f:
        return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]


def interp(rows, t, key):
    ts = [r["t"] for r in rows]
    i = bisect.bisect_left(ts, t - 1e-12)
    if i < len(ts) and abs(ts[i] - t) < 1e-9:
        return rows[i][key]
    if i == 0 or i >= len(ts):
        return math.nan
    a, b = rows[i - 1], rows[i]
    w = (t - a["t"]) / (b["t"] - a["t"])
    return (1 - w) * a[key] + w * b[key]


class Source:
    """Histories either from results/ or from run directories."""

    def __init__(self, runs):
        self.runs = runs

    def vortex(self, name):
        p = (os.path.join(self.runs, name, "diagnostics.csv") if self.runs
             else os.path.join(HERE, "results", f"vortex-{name}.csv"))
        return read_rows(p) if os.path.exists(p) else None

    def spectral(self, name):
        p = (os.path.join(self.runs, name, "energy.csv") if self.runs
             else os.path.join(HERE, "results", f"{name}.csv"))
        return read_rows(p) if os.path.exists(p) else None

    def spectrum(self, who, name):
        p = os.path.join(HERE, "results", f"spectrum-t4-{who}-{name}.csv")
        if self.runs or not os.path.exists(p):
            return None
        return {int(r["k"]): r["E"] for r in read_rows(p)}


def pct(x):
    return "-" if math.isnan(x) else f"{100 * x:+.1f} %"


def eddy_turnover(spec):
    """T = L / u' from the first row: 3/2 u'^2 = E, L the integral scale if present."""
    r = spec[0]
    if "eddy_turnover" in r:
        return r["eddy_turnover"]
    return 1.0


def spectrum_gap(src, name, re):
    v = src.spectrum("vortex", name)
    s = src.spectrum("spectral", f"re{re}")
    if not v or not s:
        return "-"
    ks = [k for k in range(1, 11) if s.get(k, 0) > 0 and k in v]
    return f"{100 * max(abs(v[k] / s[k] - 1) for k in ks):.0f} %"


def iso_table(src):
    lines = []
    for re in (20, 40):
        spec = src.spectral(f"spectral-re{re}")
        if spec is None:
            continue
        big_t = eddy_turnover(spec)
        lines.append(f"\n### Re_lambda = {re} (nu = {0.02 if re == 20 else 0.01}), T = {big_t:.3f}\n")
        head = " | ".join(f"dE, dZ at t/T = {x}" for x in TIMES_T)
        lines.append(f"| option | overlap | re-interpolation | {head} | max \\|dE\\|, max \\|dZ\\| to t/T = 6 | E(k) k <= 10 at t = 4 | re-interpolations per 100 steps |")
        lines.append("|---|---|---|" + "---|" * len(TIMES_T) + "---|---|---|")
        for name, r, ov, reint, what in ISO_OPTIONS:
            if r != re:
                continue
            v = src.vortex(name)
            if v is None:
                continue
            cells = []
            for x in TIMES_T:
                t = x * big_t
                de = interp(v, t, "energy") / interp(spec, t, "energy") - 1
                dz = interp(v, t, "enstrophy") / interp(spec, t, "enstrophy") - 1
                cells.append(f"{pct(de)}, {pct(dz)}")
            de_max = dz_max = 0.0
            for row in v:
                if row["t"] > 6 * big_t + 1e-9:
                    break
                de = row["energy"] / interp(spec, row["t"], "energy") - 1
                dz = row["enstrophy"] / interp(spec, row["t"], "enstrophy") - 1
                de_max = de if abs(de) > abs(de_max) else de_max
                dz_max = dz if abs(dz) > abs(dz_max) else dz_max
            reached = v[-1]["t"] / big_t
            note = "" if reached >= 6 - 1e-6 else f" (run reached t/T = {reached:.1f})"
            lines.append(f"| {what}{note} | {ov} | {reint} | " + " | ".join(cells)
                         + f" | {pct(de_max)}, {pct(dz_max)} | {spectrum_gap(src, name, re)} | {REINT.get(name, '-')} |")
    return "\n".join(lines)


def stability_table(src):
    lines = ["| case | settings | outcome | max \\|dE\\| vs spectral 64^3 (to the end of both) | dE at the last common row |",
             "|---|---|---|---|---|"]
    for name, ref, case, settings in STABILITY:
        v, s = src.vortex(name), src.spectral(ref)
        if v is None or s is None:
            continue
        worst, end = 0.0, math.nan
        for row in v:
            e = interp(s, row["t"], "energy")
            if not math.isnan(e):
                d = row["energy"] / e - 1
                worst = d if abs(d) > abs(worst) else worst
                end = d
        outcome = OUTCOME.get(name, f"reached t = {v[-1]['t']:.2f}")
        lines.append(f"| {case} | {settings} | {outcome} | {pct(worst)} | {pct(end)} |")
    return "\n".join(lines)


# from the run logs (not in the histories)
REINT = {"v20_base": "9", "v20_s1": "17", "v20_o09": "18", "v20_o08": "16", "v20_o06": "25",
         "v20_o05": "33", "v40_base": "4", "v40_s1": "38", "v40_o08": "34", "v40_o06": "18"}
OUTCOME = {
    "tg16_base": "stopped at step 115 (t = 5.75): energy rose 3.1 % (was: exit 0 after blow-up at t = 8)",
    "tg16_s05": "ran to t = 20, 116 re-interpolations",
    "tg32_base": "stopped at step 370 (t = 9.25): energy rose 2.2 % (was: exit 0, +117 % at t = 10)",
    "tg32_s05": "ran to t = 10, 72 re-interpolations",
    "tg32_o08_s05": "ran to t = 10, 71 re-interpolations",
    "tg1600_64": "stopped at step 520 (t = 5.2): energy rose 2.0 % (was: blow-up to 66x at t = 4.5)",
}

TEXT = """# Vortex method against the spectral solver: isotropic turbulence and long-time stability

Generated by `compare.py` from `results/` (do not edit by hand). All runs on one NVIDIA H100
(`vortex run --backend cuda --grid uniform`, p = 10, periodic; `vortex spectral --backend cuda`),
2026-11-25, the vortex-method and spectral twins starting from the identical field
(`runs/isotropic-64.toml` and `runs/vortex-isotropic-64.toml` with `nu`, `re_lambda`,
`initial.overlap` and `reinterpolation.strain` as listed; `spectral::initial::isotropic(64,
k_peak = 4, seed = 2024)`). Reproduce a row: copy the two configurations, set the options, run
both to t = 5 and call `python3 validation/isotropic/compare.py --runs DIR`.

## Why the vortex method loses enstrophy (the gap explained)

The classical stretching (core paper Eq. 9) changes the blob field at the particles at the rate
`A [(alpha . grad) u]` (`A` the Gaussian interpolation matrix of the lattice) where the vorticity
equation asks for `(omega . grad) u`: a vorticity mode `k1` times a velocity-gradient mode `k2`
is weighted by `G(k1 + k2) / G(k1)`, `G(k) = exp(-k^2 sigma^2 / 2)`. That is an `O((k sigma)^2)`
damping of exactly the transfer to small scales that makes the enstrophy grow. On the
Taylor-Green field at t = 0, where the exact rate is known, the classical rate misses it by 50 %
at n = 12 and 16 % at n = 24 (order 1.7), while the FMM's stretching with the nodal vorticity as
target strength is exact to 1e-6 (`crates/method/tests/stretching_consistency.rs`). It explains
both observations of the issue: small for smooth fields, large where the velocity gradient lives
at the smallest resolved scales; and it does not go away with more frequent re-interpolation.

Correcting the rate (strengths evolved so that the nodal vorticity follows `(omega . grad) u`,
with `A^-1` by the separable lattice solve and, for displaced particles, preconditioned
iterations) was tried: exact at t = 0, but it drains energy 3x faster than the classical scheme
on Taylor-Green 16^3 (the relative motion of the blobs changes the nodal values at the same
order) and diverges once the particles leave their lattice points by a fraction of `h`. It is
not part of the code. What remains of the error is governed by `sigma` itself.

## Options on isotropic turbulence (64^3 particles = 64^3 spectral grid)

`dE = E_vortex / E_spectral - 1`, `dZ` likewise (enstrophy); `max` over all diagnostics rows
up to t/T = 6; the spectrum column is the largest relative difference of E(k) over k = 1..10
(about kmax/3) at t = 4 (t/T = 5.2). Strain criterion: re-interpolate when
`(t - t_reset) max|alpha| / h^3` exceeds the limit (`reinterpolation.strain`).
{iso}

Reading: a smaller core (overlap 0.8) shrinks the `O(sigma^2)` error and halves the energy gap;
below ~0.8 the blobs no longer overlap enough and every re-interpolation removes energy
(overlap 0.6: -62 % at t/T = 6; 0.5: the flow is gone by t/T = 2); 1.25 diverges at t = 0.5 (the
lattice system's conditioning). The strain criterion alone changes little (1-2 points). The
bounds of the issue (Re_lambda 20: |dE| <= 3 %, |dZ| <= 10 % to t/T = 6) are **not** reached with
64^3 particles: the best option (overlap 0.8) is at +7.1 % / -14.3 %. What is left needs either
more particles than spectral grid points (the `O(sigma^2)` error falls 4x per doubling) or
higher-order cores; 128^3 runs need the re-interpolation on the GPU (a host re-interpolation of
128^3 particles takes ~20 s on 16 cores and is due every 2-3 steps).

Per-step costs are not compared here: the runs shared one H100 host three to six at a time.

## Long-time stability (Taylor-Green), against the spectral solver at 64^3
{stab}

The energy check (`output.energy_rise_warn`, `output.energy_rise_limit`,
`crates/method/src/energy_check.rs`) turns a rising energy history into a warning and then an
error naming the step; the strain criterion keeps the Taylor-Green runs stable to t = 20 (16^3)
and t = 10 (32^3) where core growth alone re-interpolates too rarely. Their energy no longer
rises, but the 32^3 run is +13..16 % above the spectral energy at t = 10 (the same
`O(sigma^2)` deficit of the cascade: the dissipation peak at t ~ 6 is under-resolved with 32
particles per period), not within the 3 % the issue asks. Taylor-Green at Re = 1600 with 64^3
particles still gains energy after t ~ 4.5 and is stopped at t = 5.2 with the error.
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", help="directory of run outputs named as in the tables")
    ap.add_argument("--check", action="store_true", help="build the tables, write nothing")
    ap.add_argument("--out", default=os.path.join(HERE, "README.md"))
    args = ap.parse_args()
    src = Source(args.runs)
    text = TEXT.format(iso=iso_table(src), stab=stability_table(src))
    if args.check:
        rows = [l for l in text.splitlines() if l.startswith("| ") and "---" not in l]
        print(f"{len(rows)} table rows")
        if len(rows) < 3:
            sys.exit("no table rows: missing histories")
        return
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

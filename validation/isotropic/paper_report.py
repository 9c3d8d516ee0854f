#!/usr/bin/env python3
"""The core paper's Section 5.1 (decaying isotropic turbulence, 256^3 particles against the
256^3 pseudo-spectral solver, to t/T = 10): configurations, collection and report.

    paper_report.py configs --out DIR     the two run configurations (from the shipped ones)
    paper_report.py collect --vortex-run V --spectral-run S --results R
                                          the small results from the run directories (numpy)
    paper_report.py report --results R    R/README.md and the figures (numpy, matplotlib;
                                          scikit-image for the isosurfaces of Fig. 13)

`validation/isotropic/paper256.sh` calls all three. `collect` needs numpy only, so that it runs
where the runs ran; `report` can run anywhere afterwards from the collected files (a few MB).
The arithmetic and the readers are in `paper_data.py`; the checks are those of the project's
issue on Section 5.1: K(t) within 2 % to t/T = 10, E(k) within 10 % for k <= 10 at t/T = 1, 3,
6, 10, and within 10 % up to k_max/3 once the blob filter exp(-k^2 sigma^2) is applied to the
spectral spectrum (or the smoothing shown to be the whole gap), the whole command within 15
minutes.
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paper_data as pd  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WALL_LIMIT_S = 15 * 60
# grid points per side of the cubes of II kept for the isosurfaces (1 MB each in float32)
CUBE = 64


def cmd_configs(a):
    with open(a.vortex) as f:
        vtext = f.read()
    with open(a.spectral) as f:
        stext = f.read()
    v, s, times = pd.paper_configs(vtext, stext, a.turnover, a.test_size)
    os.makedirs(a.out, exist_ok=True)
    for name, text in (("vortex.toml", v), ("spectral.toml", s)):
        with open(os.path.join(a.out, name), "w") as f:
            f.write(text)
    print(" ".join(f"{t:g}" for t in times))


# ---------------------------------------------------------------------------------------------
# collect


def iso_seconds(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def invocations(run_json):
    """The invocations of a run.json: backend, host, commit, status and wall seconds each."""
    with open(run_json) as f:
        doc = json.load(f)
    out = []
    for inv in doc.get("invocations", []):
        keep = ("backend", "host", "commit", "status", "start", "end", "command_line")
        out.append({k: inv.get(k) for k in keep}
                   | {"wall_s": iso_seconds(inv["end"]) - iso_seconds(inv["start"])})
    return out


def spectral_summaries(log_path):
    """`(steps, seconds)` of each `N steps in X s` summary line of the spectral run's log."""
    out = []
    if os.path.exists(log_path):
        with open(log_path, errors="replace") as f:
            for line in f:
                m = re.match(r"^(\d+) steps in ([0-9.]+) s \(", line.strip())
                if m:
                    out.append((int(m.group(1)), float(m.group(2))))
    return out


def run_facts(vdir, sdir, slog):
    """Steps, seconds and machine of the two runs (runs.json of the results)."""
    timing = pd.read_rows(os.path.join(vdir, "timing.csv"))
    v_inv = invocations(os.path.join(vdir, "run.json"))
    s_inv = invocations(os.path.join(sdir, "run.json"))
    summ = spectral_summaries(slog)
    return {
        "vortex": {"steps": len(timing), "step_seconds": sum(r["s_step"] for r in timing),
                   "wall_seconds": sum(i["wall_s"] for i in v_inv), "invocations": v_inv},
        "spectral": {"steps": sum(s for s, _ in summ) if summ else None,
                     "step_seconds": sum(x for _, x in summ) if summ else None,
                     "wall_seconds": sum(i["wall_s"] for i in s_inv), "invocations": s_inv},
    }


def collect_fields(vdir, sdir, length, sigma_of):
    """II = u_ij u_ji of both solvers at the last grid snapshot of the vortex run (its time
    must have a spectral velocity file), the statistics and the mid-plane slices; the check of
    the grid alignment (the velocities at t = 0) and of the reader (II against -2 Q of the
    vortex run's file)."""
    import numpy as np

    grids, vels = pd.grid_files(vdir), pd.velocity_files(sdir)
    if not grids:
        raise SystemExit(f"{vdir}: no grid_STEP.vtk (output.snapshot_every of the vortex run)")
    first, last = min(grids), max(grids)
    g0 = pd.read_vtk_fields(grids[first], ["velocity"])
    t0 = pd.vtk_time(g0["title"])
    s0 = pd.at_time(vels, t0)
    if s0 is None:
        raise SystemExit(f"{sdir}: no velocity_*.npy at t = {t0} (spectral field_times)")
    u0 = np.load(s0)
    align = float(np.linalg.norm(g0["velocity"] - u0) / np.linalg.norm(u0))
    del g0, u0
    g = pd.read_vtk_fields(grids[last], ["velocity", "Q"])
    t = pd.vtk_time(g["title"])
    sp = pd.at_time(vels, t)
    if sp is None:
        raise SystemExit(f"{sdir}: no velocity_*.npy at t = {t} (spectral field_times)")
    sigma = sigma_of(t)
    n = g["n"]
    ii_v = pd.second_invariant(g["velocity"], length)
    reader = pd.field_stats(pd.second_invariant(g["velocity"], length, nyquist=True),
                            -2.0 * g["Q"])["rel_l2"]
    del g
    us = np.load(sp)
    ii_s = pd.second_invariant(us, length)
    ii_f = pd.second_invariant(us, length, sigma)
    del us
    stats = {"t": t, "t0": t0, "n": n, "length": length, "sigma": sigma,
             "velocity_t0_rel_l2": align, "vtk_q_check_rel_l2": reader,
             "vortex_vs_spectral": pd.field_stats(ii_v, ii_s),
             "vortex_vs_filtered": pd.field_stats(ii_v, ii_f),
             "rms": {"vortex": float(np.sqrt(np.mean(ii_v ** 2))),
                     "spectral": float(np.sqrt(np.mean(ii_s ** 2))),
                     "filtered": float(np.sqrt(np.mean(ii_f ** 2)))}}
    k = n // 2
    slices = {"vortex": ii_v[:, :, k], "spectral": ii_s[:, :, k], "filtered": ii_f[:, :, k]}
    # the isosurfaces of Fig. 13: II of both runs on the cube of CUBE^3 grid points (the whole
    # box up to 64^3) at the lower corner of the box
    m = min(n, CUBE)
    cubes = {"vortex_cube": ii_v[:m, :m, :m], "spectral_cube": ii_s[:m, :m, :m]}
    stats["cube"] = {"points": m, "origin": -0.5 * length, "spacing": length / n}
    return stats, {name: a.astype(np.float32) for name, a in (slices | cubes).items()}


def cmd_collect(a):
    import numpy as np

    vdir, sdir, res = a.vortex_run, a.spectral_run, a.results
    os.makedirs(res, exist_ok=True)
    copies = [(vdir, "diagnostics.csv", "vortex-diagnostics.csv"),
              (vdir, "timing.csv", "vortex-timing.csv"), (vdir, "run.json", "vortex-run.json"),
              (vdir, "config.toml", "vortex-config.toml"),
              (sdir, "energy.csv", "spectral-energy.csv"), (sdir, "run.json", "spectral-run.json"),
              (sdir, "config.toml", "spectral-config.toml")]
    for d, src, dst in copies:
        shutil.copyfile(os.path.join(d, src), os.path.join(res, dst))
    vspec, sspec = pd.spectrum_files(vdir), pd.spectrum_files(sdir)
    for t, path in sorted(sspec.items()):
        vp = pd.at_time(vspec, t)
        if vp is None:
            raise SystemExit(f"{vdir}: no spectrum at t = {t} (the spectral run has {path})")
        shutil.copyfile(path, os.path.join(res, f"spectral-spectrum_{t:.4f}.csv"))
        shutil.copyfile(vp, os.path.join(res, f"vortex-spectrum_{t:.4f}.csv"))
    diag = pd.read_rows(os.path.join(vdir, "diagnostics.csv"))

    def sigma_of(t):
        for r in diag:
            if abs(r["t"] - t) < 1e-6:
                return r["max_sigma"]
        raise SystemExit(f"{vdir}/diagnostics.csv: no row at t = {t}")

    import tomllib
    with open(os.path.join(vdir, "config.toml"), "rb") as f:
        length = tomllib.load(f)["domain"]["box_length"]
    stats, slices = collect_fields(vdir, sdir, length, sigma_of)
    np.savez_compressed(os.path.join(res, "fields.npz"), **slices)
    facts = run_facts(vdir, sdir, a.spectral_log)
    with open(os.path.join(res, "runs.json"), "w") as f:
        json.dump({"runs": facts, "fields": stats}, f, indent=1)
    print(f"collected into {res}: II at t = {stats['t']:.4f}, vortex vs spectral relative L2 "
          f"{stats['vortex_vs_spectral']['rel_l2']:.3f}; velocity at t = 0 relative L2 "
          f"{stats['velocity_t0_rel_l2']:.2e}; -2Q check {stats['vtk_q_check_rel_l2']:.2e}")
    if a.check and (stats["velocity_t0_rel_l2"] > 1e-4 or stats["vtk_q_check_rel_l2"] > 1e-8):
        raise SystemExit("collect --check: the grids of the two runs are not aligned at t = 0, "
                         "or II from the vortex run's velocity disagrees with its -2 Q")


# ---------------------------------------------------------------------------------------------
# report


def load(res):
    """Everything the report needs from the results directory."""
    import numpy as np

    d = {"vdiag": pd.read_rows(os.path.join(res, "vortex-diagnostics.csv")),
         "senergy": pd.read_rows(os.path.join(res, "spectral-energy.csv"))}
    with open(os.path.join(res, "runs.json")) as f:
        d |= json.load(f)
    d["fields_npz"] = dict(np.load(os.path.join(res, "fields.npz")))
    d["spectra"] = {}
    for name in os.listdir(res):
        m = re.match(r"^(vortex|spectral)-spectrum_(\d+\.\d+)\.csv$", name)
        if m:
            d["spectra"].setdefault(float(m.group(2)), {})[m.group(1)] = \
                pd.read_spectrum(os.path.join(res, name))
    import tomllib
    with open(os.path.join(res, "vortex-config.toml"), "rb") as f:
        d["vcfg"] = tomllib.load(f)
    # the T of the comparison times (`paper_report.py configs` made it the interval of the
    # vortex run's diagnostics rows) and the one measured on the initial field
    d["T"] = d["vcfg"]["output"]["diagnostics_interval"]
    d["T_measured"] = d["senergy"][0]["eddy_turnover"]
    for key, default in (("machine.txt", ""), ("timeline.txt", "")):
        p = os.path.join(res, key)
        d[key] = open(p).read() if os.path.exists(p) else default
    return d


def history(d):
    """(t, K_v, K_s, Z_v, Z_s) at the vortex rows that the spectral history covers."""
    out = []
    for r in d["vdiag"]:
        ks = pd.interp(d["senergy"], r["t"], "energy")
        zs = pd.interp(d["senergy"], r["t"], "enstrophy")
        if not math.isnan(ks):
            out.append((r["t"], r["energy"], ks, r["enstrophy"], zs))
    return out


def spectrum_rows(d):
    """Per comparison time (the first vortex step at or after m T): the spectra and checks."""
    n = d["vcfg"]["initial"]["n"]
    kmax = n // 2
    sig = {round(r["t"], 6): r["max_sigma"] for r in d["vdiag"]}
    out = []
    for m in pd.TIMES_OVER_T:
        cand = [t for t in d["spectra"] if t >= m * d["T"] - 1e-9 and len(d["spectra"][t]) == 2]
        if not cand:
            out.append({"m": m, "missing": True})
            continue
        t = min(cand)
        k, ev = d["spectra"][t]["vortex"]
        _, es = d["spectra"][t]["spectral"]
        sigma = sig.get(round(t, 6), math.nan)
        ef = [e * f for e, f in zip(es, pd.blob_filter(k, sigma, pd.core_order(d["vcfg"])))]
        raw10 = pd.max_rel_diff(k, ev, es, min(10, kmax))
        raw3 = pd.max_rel_diff(k, ev, es, kmax / 3)
        fil3 = pd.max_rel_diff(k, ev, ef, kmax / 3)
        share = pd.gap_share(k, ev, es, sigma, 10, kmax / 3)
        out.append({"m": m, "t": t, "k": k, "ev": ev, "es": es, "ef": ef, "sigma": sigma,
                    "raw10": raw10, "raw3": raw3, "fil3": fil3, "share": share, "kmax": kmax})
    return out


def plot_history(h, turnover, path, core=2):
    import matplotlib.pyplot as plt

    t = [x[0] / turnover for x in h]
    fig, ax = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    for col, (iv, is_, name) in enumerate(((1, 2, "K"), (3, 4, "enstrophy"))):
        ax[0, col].plot(t, [x[iv] / h[0][iv] for x in h], "o-", ms=3, label="vortex method")
        ax[0, col].plot(t, [x[is_] / h[0][is_] for x in h], "-", label="spectral")
        ax[0, col].set_ylabel(f"{name}(t) / {name}(0)")
        ax[0, col].legend()
        ax[1, col].plot(t, [100 * (x[iv] / x[is_] - 1) for x in h], "o-", ms=3)
        ax[1, col].axhline(0, color="k", lw=0.5)
        ax[1, col].set_ylabel(f"{name}: vortex / spectral - 1 (%)")
        ax[1, col].set_xlabel("t / T")
    ax[1, 0].axhspan(-2, 2, color="g", alpha=0.1, label="2 %")
    ax[1, 0].legend()
    fig.suptitle("Fig. 11: kinetic energy and enstrophy, vortex method (core of order "
                 f"{core}) against spectral")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_spectra(rows, path):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 4, figsize=(16, 7), sharex=True,
                           gridspec_kw={"height_ratios": [3, 2]})
    for i, r in enumerate(rows):
        if r.get("missing"):
            continue
        k = r["k"]
        pick = [j for j in range(len(k)) if 0 < k[j] <= r["kmax"]]
        kk = [k[j] for j in pick]
        a = ax[0, i]
        a.loglog(kk, [r["es"][j] for j in pick], "-", label="spectral")
        a.loglog(kk, [r["ef"][j] for j in pick], "--", label="spectral x exp(-k^2 sigma^2)")
        a.loglog(kk, [r["ev"][j] for j in pick], ".", ms=4, label="vortex method")
        a.set_title(f"t/T = {r['m']} (t = {r['t']:.2f}), sigma = {r['sigma']:.4f}")
        a.set_ylim(bottom=max(1e-12, min(r["ev"][j] for j in pick if r["ev"][j] > 0)))
        b = ax[1, i]
        b.semilogx(kk, [r["ev"][j] / r["es"][j] for j in pick], "-", label="E_v / E_s")
        b.semilogx(kk, [r["ev"][j] / r["ef"][j] for j in pick], "--", label="E_v / (E_s filter)")
        b.axhspan(0.9, 1.1, color="g", alpha=0.1)
        b.set_ylim(0, 1.5)
        b.set_xlabel("k")
        for x in (10, r["kmax"] / 3):
            a.axvline(x, color="gray", lw=0.5)
            b.axvline(x, color="gray", lw=0.5)
    ax[0, 0].set_ylabel("E(k)")
    ax[1, 0].set_ylabel("ratio")
    ax[0, 0].legend(fontsize=8)
    ax[1, 0].legend(fontsize=8)
    fig.suptitle("Fig. 12: energy spectra (lines at k = 10 and k_max / 3)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_invariant(fields, stats, path):
    import matplotlib.pyplot as plt
    import numpy as np

    v, s, f = fields["vortex"], fields["spectral"], fields["filtered"]
    lim = float(np.percentile(np.abs(s), 99.5))
    half = stats["length"] / 2
    panels = [(v, "vortex method"), (s, "spectral"), (f, "spectral, blob-filtered"),
              (v - s, "vortex - spectral"), (v - f, "vortex - filtered spectral")]
    fig, ax = plt.subplots(1, 5, figsize=(22, 5), layout="constrained")
    for a, (x, title) in zip(ax, panels):
        im = a.imshow(x.T, origin="lower", cmap="RdBu_r", vmin=-lim, vmax=lim,
                      extent=[-half, half, -half, half])
        a.set_title(title)
        a.set_xlabel("x")
    ax[0].set_ylabel("y")
    fig.colorbar(im, ax=ax, shrink=0.8, label="II = u_ij u_ji")
    fig.suptitle(f"Fig. 13: second invariant on the mid-plane z = 0 at t = {stats['t']:.2f} "
                 f"(sigma = {stats['sigma']:.4f})")
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_isosurfaces(fields, stats, path):
    """Fig. 13 as the core paper draws it: isosurfaces of the second invariant of both runs
    (one level, `Q = -II / 2 = rms(II)` of the spectral run over the box), on the cube kept by
    `collect`. Returns a line for the README, or the reason there is no figure."""
    cube = stats.get("cube")
    if cube is None or "vortex_cube" not in fields:
        return None, ("the collected results hold no cube of II (collected before the "
                      "isosurfaces): `paper_report.py collect` again from the run directories")
    try:
        import skimage  # noqa: F401
    except ImportError:
        return None, "scikit-image is not installed where the report was drawn (pip install scikit-image)"
    import isosurface

    q_level = stats["rms"]["spectral"]
    h, o, m = cube["spacing"], cube["origin"], cube["points"]
    # Q = -II / 2 > level: the vortex cores
    panels = [("vortex method", -0.5 * fields["vortex_cube"]),
              ("spectral", -0.5 * fields["spectral_cube"])]
    info = isosurface.plot_isosurfaces(
        panels, q_level, (h, h, h), (o, o, o), path,
        f"Fig. 13: isosurfaces Q = -II/2 = {q_level:.3g} (the rms of II of the spectral run) at "
        f"t = {stats['t']:.2f}, the cube [{o:.2f}, {o + h * (m - 1):.2f}]^3 ({m}^3 points)")
    text = "; ".join(f"{name} {faces} triangles" + (f" (marching-cubes step {step})" if step > 1 else "")
                     for name, faces, step in info)
    return info, text


def pf(ok):
    return "not measured" if ok is None else "**PASS**" if ok else "**FAIL**"


def timeline(text):
    """{key: epoch seconds, or the rest of the line} of timeline.txt (written by paper256.sh)."""
    out = {}
    for line in text.splitlines():
        w = line.split(maxsplit=1)
        if len(w) == 2:
            try:
                out[w[0]] = float(w[1].split()[0])
            except ValueError:
                out[w[0]] = w[1].strip()
    return out


def cmd_report(a):
    import matplotlib

    matplotlib.use("Agg")
    res = a.results
    d = load(res)
    turnover = d["T"]
    h = history(d)
    rows = spectrum_rows(d)
    plot_history(h, turnover, os.path.join(res, "fig11_energy_enstrophy.png"),
                 pd.core_order(d["vcfg"]))
    plot_spectra(rows, os.path.join(res, "fig12_spectra.png"))
    plot_invariant(d["fields_npz"], d["fields"], os.path.join(res, "fig13_second_invariant.png"))
    iso, iso_text = plot_isosurfaces(d["fields_npz"], d["fields"],
                                     os.path.join(res, "fig13_isosurfaces.png"))
    d["isosurfaces"] = (iso, iso_text)
    text, checks = readme(d, h, rows, matplotlib.__version__)
    with open(os.path.join(res, "README.md"), "w") as f:
        f.write(text)
    print(f"wrote {os.path.join(res, 'README.md')}")
    for name, ok in checks:
        print(f"{'-' if ok is None else 'PASS' if ok else 'FAIL'}  {name}")
    if a.check:
        for name in ("the two grids aligned at t = 0", "II of the vortex run's file = -2 Q"):
            if not dict(checks).get(name):
                raise SystemExit(f"report --check: {name} failed")
        if iso is None or any(faces == 0 for _, faces, _ in iso):
            raise SystemExit(f"report --check: no isosurfaces of II: {iso_text}")


def fmt_pct(x):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f} %"


def section_checks(d, h, rows, tl):
    """The checks of the issue: (name, passed, figure)."""
    upto = [x for x in h if x[0] <= 10 * d["T"] * (1 + 1e-6) or x is h[-1]]
    dk = max(abs(x[1] / x[2] - 1) for x in upto)
    checks = [(f"K(t) within 2 % to t/T = 10 (largest {fmt_pct(dk)})", dk <= 0.02)]
    for r in rows:
        if r.get("missing"):
            checks.append((f"E(k) at t/T = {r['m']}: no spectra of both runs", False))
            continue
        checks.append((f"E(k) within 10 % for k <= 10 at t/T = {r['m']} (largest "
                       f"{fmt_pct(r['raw10'][0])} at k = {r['raw10'][1]:g})",
                       r["raw10"][0] <= 0.10))
        k3 = int(r["kmax"] / 3)
        whole = r["share"] is not None and 0.9 <= r["share"] <= 1.1
        checks.append((f"E(k) within 10 % for k <= {k3} with the blob filter at t/T = {r['m']} "
                       f"(largest {fmt_pct(r['fil3'][0])} at k = {r['fil3'][1]:g}; the filter "
                       f"accounts for {fmt_pct(r['share'])} of the gap over 10 < k <= {k3})",
                       r["fil3"][0] <= 0.10 or whole))
    f = d["fields"]
    checks.append(("the two grids aligned at t = 0", f["velocity_t0_rel_l2"] <= 1e-4))
    checks.append(("II of the vortex run's file = -2 Q", f["vtk_q_check_rel_l2"] <= 1e-8))
    if "start" in tl and "collected" in tl:
        wall = tl["collected"] - tl["start"]
        if "restart" in tl:
            # this invocation continued interrupted runs: its time is not that of the whole
            checks.append((f"the command within 15 minutes (not measured: the last invocation "
                           f"continued interrupted runs, {wall:.0f} s)", None))
        else:
            checks.append((f"the command within 15 minutes ({wall:.0f} s, "
                           f"{tl.get('mode', '?')})", wall <= WALL_LIMIT_S))
    return checks


def machine_of(d):
    """The GPU named by the runs (run.json backend) and by nvidia-smi."""
    names = []
    for who in ("vortex", "spectral"):
        for inv in d["runs"][who]["invocations"]:
            cmd = " ".join(os.path.basename(x) if i == 0 else x
                           for i, x in enumerate(inv.get("command_line") or []))
            names.append(f"{who}: `{cmd}`: {inv['backend']} on {inv['host']}, commit "
                         f"{inv['commit']}, {inv['status']} after {inv['wall_s']:.0f} s")
    smi = [x.strip() for x in d["machine.txt"].splitlines() if x.strip()]
    return names, smi


def timing_table(d):
    seed = pd.SEED_SECONDS / pd.SEED_STEPS
    lines = ["| run | steps | seconds per step | seconds of steps | wall seconds (run.json) "
             "| per step against the core paper's |",
             "|---|---|---|---|---|---|",
             f"| core paper, 256^3, p = 10, {pd.SEED_GPUS} GeForce 8800 GT | {pd.SEED_STEPS} "
             f"| {seed:.2f} | {pd.SEED_SECONDS:.0f} | - | 1 |"]
    v = d["vcfg"]
    n = v["initial"]["n"]
    for who, what in (("vortex", f"vortex method, {n}^3 particles, p = "
                                 f"{v['evaluation']['order']}, one device"),
                      ("spectral", f"pseudo-spectral {n}^3, RK4, one device")):
        r = d["runs"][who]
        steps, sec = r["steps"], r["step_seconds"]
        per = sec / steps if steps and sec else None
        ratio = f"{seed / per:.1f}x faster" if per and who == "vortex" else "-"
        lines.append(f"| {what} | {steps if steps else '-'} | {per and f'{per:.3f}' or '-'} | "
                     f"{sec and f'{sec:.0f}' or '-'} | {r['wall_seconds']:.0f} | "
                     f"{ratio} |")
    return lines


def readme(d, h, rows, mpl_version):
    """README.md text and the list of (check, passed)."""
    tl = timeline(d["timeline.txt"])
    turnover = d["T"]
    checks = section_checks(d, h, rows, tl)
    names, smi = machine_of(d)
    f = d["fields"]
    n = d["vcfg"]["initial"]["n"]
    core = pd.core_order(d["vcfg"])
    core_name = "the Gaussian" if core == 2 else f"the Gaussian-based core of order {core}"
    out = [f"# The core paper's Section 5.1 at {n}^3: vortex method against the spectral solver",
           "",
           f"Core of the vortex run: order {core} ({core_name}; `evaluation.core` of",
           "`vortex-config.toml`).",
           "",
           "Generated by `paper_report.py report` from the files of this directory (do not edit by",
           "hand); the runs, their outputs and these files come from one command:",
           "",
           "    validation/isotropic/paper256.sh --gpus 0,1 --bin PATH/vortex",
           "",
           "(`runs/vortex-isotropic-256.toml` by `vortex run --backend cuda --grid uniform`, the",
           "particles resident on the GPU, and `runs/isotropic-256.toml` by `vortex spectral",
           "--backend cuda`, as shipped but for `t_end` and the outputs: `vortex-config.toml` and",
           "`spectral-config.toml` are the configurations as run, the commands below those that",
           f"ran). Both start from the same field. T = {turnover:.6f} is the initial eddy turnover",
           f"time L / u' (measured on the initial field: {d['T_measured']:.6f}, first row of",
           "`spectral-energy.csv`); the solvers are compared at the first vortex step at or after",
           "t/T = 1, 3, 6, 10. The numbers of the runs were collected by `paper_report.py",
           f"collect` (numpy) where they ran; the figures drawn with matplotlib {mpl_version} on",
           f"{platform.node()} (`paper_report.py report`, or `paper256.sh --report-only`, from",
           "the files of this directory: a GPU node without matplotlib needs none).",
           "", "Runs:", ""]
    out += [f"- {x}" for x in names]
    if smi:
        out += ["", "Machine (nvidia-smi):", ""] + [f"    {x}" for x in smi]
    out += ["", "## Checks", "", "| check | result |", "|---|---|"]
    out += [f"| {name} | {pf(ok)} |" for name, ok in checks]
    out += ["", "## Fig. 11: kinetic energy and enstrophy", "",
            "![Fig. 11](fig11_energy_enstrophy.png)", "",
            "| t | t/T | K vortex | K spectral | dK | enstrophy vortex | enstrophy spectral | dZ |",
            "|---|---|---|---|---|---|---|---|"]
    marks = [min(h, key=lambda x: abs(x[0] - m * turnover)) for m in (0, 1, 2, 3, 4, 6, 8, 10)]
    for x in sorted(set(marks)):
        out.append(f"| {x[0]:.2f} | {x[0] / turnover:.2f} | {x[1]:.6f} | {x[2]:.6f} | "
                   f"{fmt_pct(x[1] / x[2] - 1)} | {x[3]:.3f} | {x[4]:.3f} | "
                   f"{fmt_pct(x[3] / x[4] - 1)} |")
    out += ["", "## Fig. 12: energy spectra", "", "![Fig. 12](fig12_spectra.png)", "",
            "The vortex method's velocity is that of the Gaussian blobs, smoothed by",
            "`exp(-k^2 sigma^2 / 2)` (core paper Eq. 2-3), hence the spectral spectrum times the",
            "blob filter `exp(-k^2 sigma^2)` with the core radius of the vortex run at that time",
            "(`max_sigma` of its diagnostics row; re-interpolation resets it to the initial",
            "radius, core spreading lets it grow to 1.2 times that). The share of the gap is",
            "`sum k^2 sigma^2 / sum ln(E_spectral / E_vortex)` over 10 < k <= k_max / 3 (100 %:",
            "the filter is the whole gap). The filter is a measure of the size of the smoothing,",
            "not an identity: each re-interpolation's RBF solve makes the blob vorticity equal",
            "the nodal vorticity again, so the smoothing acts through the dynamics between",
            "re-interpolations, e.g. the `O(k^2 sigma^2)` damping of the stretching",
            "(validation/isotropic/README.md).", "",
            "| t/T | t | sigma | max dE, k <= 10 | max dE, k <= k_max/3 | ... with the filter "
            "| share of the gap the filter accounts for |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("missing"):
            out.append(f"| {r['m']} | - | - | - | - | - | - |")
            continue
        out.append(f"| {r['m']} | {r['t']:.2f} | {r['sigma']:.5f} | {fmt_pct(r['raw10'][0])} | "
                   f"{fmt_pct(r['raw3'][0])} | {fmt_pct(r['fil3'][0])} | "
                   f"{fmt_pct(r['share'])} |")
    vs, vf = f["vortex_vs_spectral"], f["vortex_vs_filtered"]
    iso, iso_text = d.get("isosurfaces", (None, "not drawn"))
    if iso is None:
        iso_lines = [f"No isosurfaces: {iso_text}.", ""]
    else:
        iso_lines = ["![Fig. 13, isosurfaces](fig13_isosurfaces.png)", "",
                     "Isosurfaces `Q = -II / 2` at one level for both runs, the rms of II of the",
                     "spectral run over the box (vortex cores are `Q > 0`), on the cube of",
                     f"{f['cube']['points']}^3 grid points at the lower corner of the box (marching",
                     "cubes of scikit-image, drawn by matplotlib off-screen; `fields.npz` holds the",
                     f"two cubes): {iso_text}. Beside them, the mid-plane z = 0:", ""]
    out += ["", "## Fig. 13: the second invariant II = u_ij u_ji at t/T = 10", ""]
    out += iso_lines
    out += ["![Fig. 13, mid-plane](fig13_second_invariant.png)", "",
            "II from both velocities by the same spectral derivatives (`fields.npz` holds the",
            "three mid-plane slices). Over the whole box:", "",
            "| | relative L2 difference | correlation | rms of II |", "|---|---|---|---|",
            f"| vortex method against spectral | {vs['rel_l2']:.3f} | {vs['correlation']:.3f} "
            f"| {f['rms']['vortex']:.2f} against {f['rms']['spectral']:.2f} |",
            f"| vortex method against blob-filtered spectral | {vf['rel_l2']:.3f} | "
            f"{vf['correlation']:.3f} | {f['rms']['vortex']:.2f} against "
            f"{f['rms']['filtered']:.2f} |", "",
            f"Checks of the comparison itself: the velocities of the two runs at t = {f['t0']:g} "
            f"differ by {f['velocity_t0_rel_l2']:.1e} (relative L2: the grids are the same), and "
            f"II computed here from the vortex run's grid velocity matches its own `-2 Q` to "
            f"{f['vtk_q_check_rel_l2']:.1e}.", "",
            "## Time", ""]
    out += timing_table(d)
    if "start" in tl and "collected" in tl and "restart" not in tl:
        out += ["", f"The whole command took {tl['collected'] - tl['start']:.0f} s from its start "
                f"to the collected results ({tl.get('mode', '?')}; runs finished after "
                f"{tl.get('runs_done', math.nan) - tl['start']:.0f} s)."]
    out += ["", "## Files", "",
            "`vortex-diagnostics.csv`, `vortex-timing.csv`, `spectral-energy.csv` (histories),",
            "`*-spectrum_T.csv` (E(k) at time T), `fields.npz` (II slices and cubes), `runs.json` (steps,",
            "times, field statistics), `*-run.json`, `*-config.toml`, `machine.txt`,",
            "`timeline.txt`. Fields and checkpoints stay in the run directories.", ""]
    return "\n".join(out), [(n, ok) for n, ok in checks]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("configs", help="the two run configurations from the shipped ones")
    c.add_argument("--vortex", default=os.path.join(ROOT, "runs/vortex-isotropic-256.toml"))
    c.add_argument("--spectral", default=os.path.join(ROOT, "runs/isotropic-256.toml"))
    c.add_argument("--turnover", type=float, default=pd.T_256,
                   help="initial eddy turnover time T (default: that of the shipped field)")
    c.add_argument("--test-size", type=int, help="n^3 lattice and grid (a test of the pipeline)")
    c.add_argument("--out", required=True)
    c = sub.add_parser("collect", help="the small results from the two run directories")
    c.add_argument("--vortex-run", required=True)
    c.add_argument("--spectral-run", required=True)
    c.add_argument("--spectral-log", required=True,
                   help="the spectral run's output (its summary lines: steps and seconds)")
    c.add_argument("--results", required=True)
    c.add_argument("--check", action="store_true", help="fail on a misaligned or misread field")
    c = sub.add_parser("report", help="README.md and the figures from the results")
    c.add_argument("--results", default=os.path.join(HERE, "results", "256"))
    c.add_argument("--check", action="store_true", help="fail on a misaligned or misread field")
    a = p.parse_args()
    {"configs": cmd_configs, "collect": cmd_collect, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    main()

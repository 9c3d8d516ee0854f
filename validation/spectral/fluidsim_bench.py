"""Time per RK4 step of fluidsim's ns3d solver (FFTW through pyfftw) on the 3-D Taylor-Green vortex,
for comparison with `vortex bench spectral` on the same machine and grid.

    python3 -m venv env && env/bin/pip install fluidsim pyfftw
    OMP_NUM_THREADS=2 env/bin/python validation/spectral/fluidsim_bench.py --n 64,128 --steps 10 --threads 2

fluidsim truncates with the 2/3 rule (coef_dealiasing = 2/3): compare with
`vortex bench spectral --dealias two-thirds`. Prints one line per grid: median seconds per step
(after two warm-up steps) and the energy after the timed steps as a sanity check.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np


def bench(n, steps, threads):
    from fluidsim.solvers.ns3d.solver import Simul

    params = Simul.create_default_params()
    params.short_name_type_run = f"tg{n}"
    params.output.HAS_TO_SAVE = False
    params.output.sub_directory = "bench"
    for ax in "xyz":
        setattr(params.oper, f"n{ax}", n)
        setattr(params.oper, f"L{ax}", 2 * np.pi)
    params.oper.type_fft = "fft3d.with_pyfftw"
    params.oper.coef_dealiasing = 2.0 / 3.0
    params.nu_2 = 1.0 / 1600
    params.time_stepping.USE_CFL = False
    params.time_stepping.deltat0 = 0.01
    params.time_stepping.type_time_scheme = "RK4"
    params.time_stepping.t_end = 1e9
    params.init_fields.type = "in_script"
    params.output.periods_print.print_stdout = 0
    sim = Simul(params)
    x, y, z = sim.oper.get_XYZ_loc() if hasattr(sim.oper, "get_XYZ_loc") else np.meshgrid(
        *(np.arange(n) * 2 * np.pi / n,) * 3, indexing="ij")
    vx = np.sin(x) * np.cos(y) * np.cos(z)
    vy = -np.cos(x) * np.sin(y) * np.cos(z)
    vz = np.zeros_like(vx)
    sim.state.init_statephys_from(vx=vx, vy=vy, vz=vz)
    sim.state.statespect_from_statephys()
    ts = sim.time_stepping
    for _ in range(2):
        ts.one_time_step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        ts.one_time_step()
        times.append(time.perf_counter() - t0)
    vxf = sim.state.state_phys.get_var("vx")
    energy = 0.5 * float(np.mean(vxf**2 + sim.state.state_phys.get_var("vy") ** 2
                                 + sim.state.state_phys.get_var("vz") ** 2))
    return statistics.median(times), energy


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", default="64,128")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    a = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    print(f"# fluidsim ns3d, pyfftw, 2/3 rule, RK4, threads {a.threads}")
    print("n,seconds_per_step,energy_after")
    for n in [int(float(s)) for s in a.n.split(",")]:
        sec, e = bench(n, a.steps, a.threads)
        print(f"{n},{sec:.4f},{e:.6f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

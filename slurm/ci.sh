#!/usr/bin/env bash
# The batch scripts of slurm/ submitted for real to a one-node Slurm on this machine
# (slurm/cluster.sh: installed and started here, stopped at the end), on tiny cases (8^3
# particles, a 16^3 spectral grid, a few seconds of work each):
#  1. the time limit: run.sbatch and spectral.sbatch with --time=1 --signal=B:USR1@55 get USR1
#     from Slurm, checkpoint, exit 75, requeue and continue until t_end, over as many jobs as
#     it takes; the last row equals an uninterrupted run's to 1e-12;
#  2. `scancel --signal=USR1` (both scripts), then a SIGKILL of the run (vortex run, as Slurm's
#     KILL after the grace delivers it): requeued both times, the second from the newest
#     checkpoint the killed run left; the last row equals the uninterrupted run's at the same
#     time to 1e-12;
#  3. a bad configuration: the job ends at once ("chain: the run failed"), never requeued;
#  4. two tasks of one job (run.sbatch under mpirun, and under srun through PMIx), CPU build:
#     the rows of one rank to 1e-9 (sums in another order, re-interpolations: ci-mpi.sh's bound);
#  5. a sweep (slurm/sweep.sh: a job array over viscosities, the table once all have ended),
#     and `vortex status` of the sweep, one line per run.
# Without Slurm and without the means to install it (root and apt-get), it says so and exits 0.
# Usage: slurm/ci.sh   (from anywhere; needs target/release/vortex built with --features mpi,
# OpenMPI and python3 with numpy)
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${CARGO_TARGET_DIR:-target}/release/vortex"
test -x "$bin" || { echo "slurm/ci.sh: $bin not built" >&2; exit 1; }
bin=$(realpath "$bin")

if ! command -v sbatch >/dev/null || ! command -v slurmctld >/dev/null; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
        echo "slurm/ci.sh: no Slurm on this machine and no root/apt-get to install it: the" \
            "Slurm tests are NOT run"
        exit 0
    fi
fi
t0=$(date +%s)
tmp=$(mktemp -d)
export VORTEX_SLURM_DIR="$tmp/cluster"
cleanup() {
    local status=$?
    if [ "$status" -ne 0 ]; then
        # what the jobs said, for the failure's reader
        for f in "$tmp"/*.out; do
            [ -f "$f" ] && { echo "---- $f"; tail -n 30 "$f"; }
        done
        tail -n 20 "$VORTEX_SLURM_DIR/slurmctld.log" "$VORTEX_SLURM_DIR/slurmd.log" 2>/dev/null
    fi
    slurm/cluster.sh stop > /dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
slurm/cluster.sh install
# more job slots than cores: every job of the test runs at once (the time-limit jobs must start
# on time), sharing the cores
VORTEX_SLURM_CPUS=8 slurm/cluster.sh start > "$tmp/env"
tick0=$(date +%s)
source "$tmp/env"
echo "== a one-node Slurm ($(sinfo -h -N -o '%N: %c cores, %m MB') started in $(($(date +%s) - t0)) s)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 VORTEX_BIN="$bin" RUST_LOG=info

# --- the cases: a periodic Taylor-Green flow of 8^3 particles (diagnostics and a checkpoint
# every step or two) and a 16^3 spectral Taylor-Green flow
cat > "$tmp/tg.toml" <<'TOML'
nu = 0.05
dt = 0.05
t_end = 12.0
[domain]
periodic = true
image_levels = 1
[evaluation]
method = "fmm"
order = 6
leaf_size = 16
backend = "cpu"
[initial]
kind = "taylor-green"
n = 8
[reinterpolation]
ratio = 0.0
every = 5
strain = 0.0
[output]
diagnostics_every = 20
checkpoint_every = 10
spectra = false
progress = false
plots = false
TOML
cat > "$tmp/sp.toml" <<'TOML'
n = 16
nu = 0.02
t_end = 15.0
dt = 0.002
diagnostics_interval = 0.5
checkpoint_interval = 1.0
threads = 1
backend = "cpu"
spectrum_times = []
[initial]
kind = "taylor-green"
TOML
# the same runs to a third of the time (the scancel case; the reference has a row there)
sed 's/^t_end = .*/t_end = 4.0/' "$tmp/tg.toml" > "$tmp/tg-short.toml"
sed 's/^t_end = .*/t_end = 5.0/' "$tmp/sp.toml" > "$tmp/sp-short.toml"

# the last row of A's CSV against the row of B's CSV at the same time, to 1e-12 relative to
# each column's scale (vortex: the first 16 columns of diagnostics.csv, the timing ones left out)
cmp_last() {
    python3 - "$@" <<'PY'
import sys, numpy as np
a_path, b_path, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
a = np.genfromtxt(a_path, delimiter=",", names=True)
b = np.genfromtxt(b_path, delimiter=",", names=True)
a, b = np.atleast_1d(a), np.atleast_1d(b)
last = a[-1]
at = np.flatnonzero(np.abs(b["t"] - last["t"]) <= 1e-9 * max(1.0, abs(last["t"])))
assert at.size >= 1, f"{b_path}: no row at t = {last['t']}"
ref = b[at[-1]]
worst = 0.0
for name in a.dtype.names[:16]:
    scale = max(np.nanmax(np.abs(b[name])), 1e-300)
    if name.startswith(("total_strength", "impulse", "centroid")):
        scale = 1.0  # vanish by symmetry: against the unit
    worst = max(worst, abs(last[name] - ref[name]) / scale)
print(f"  last row (t = {last['t']:.6g}) against the uninterrupted run's: largest relative "
      f"difference {worst:.2e}")
assert worst <= tol, worst
PY
}

# job states: the state of JOB (COMPLETED, FAILED, PENDING, ...) and its restart count
state() { scontrol show job "$1" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
restarts() { scontrol show job "$1" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p'; }
# waits until JOB has ended for good (at most $2 seconds)
wait_end() {
    local job=$1 limit=$2 s
    for _ in $(seq "$limit"); do
        s=$(state "$job")
        case $s in
        COMPLETED | FAILED | CANCELLED | TIMEOUT | OUT_OF_MEMORY | NODE_FAIL | BOOT_FAIL | DEADLINE)
            sleep 1
            [ "$(state "$job")" = "$s" ] && return 0
            ;;
        esac
        sleep 1
    done
    echo "job $job has not ended within $limit s (state $(state "$job"))" >&2
    scontrol show job "$job" >&2
    return 1
}
# waits until FILE has more than N lines (at most 120 s)
wait_lines() {
    for _ in $(seq 1200); do
        [ -f "$1" ] && [ "$(wc -l < "$1")" -gt "$2" ] && return 0
        sleep 0.1
    done
    echo "$1: not more than $2 lines after 120 s" >&2
    return 1
}
# a job of ONE task and one core (the scripts' cluster-sized #SBATCH lines overridden)
one=(--parsable --nodes=1 --ntasks=1 --ntasks-per-node=1 --cpus-per-task=1 --gpus-per-node=0)

echo "== uninterrupted runs (the references), beside the jobs"
RAYON_NUM_THREADS=1 "$bin" run "$tmp/tg.toml" --out "$tmp/ref-tg" > "$tmp/ref-tg.log" 2>&1 &
ref_tg=$!
RAYON_NUM_THREADS=1 "$bin" spectral "$tmp/sp.toml" --out "$tmp/ref-sp" --no-progress \
    > "$tmp/ref-sp.log" 2>&1 &
ref_sp=$!

# 1. the time limit: slurmctld checks the time limits (and sends --signal's warnings) every 30 s
# from its start; jobs that start about 20 s after it get their warning (due 5 s after their
# start) at the check 30 s after it, a few seconds into the run
(
    sleep $((tick0 + 20 - $(date +%s)))
    sbatch "${one[@]}" --time=1 --signal=B:USR1@55 --output="$tmp/tl-tg.out" \
        slurm/run.sbatch "$tmp/tg.toml" "$tmp/tl-tg" > "$tmp/tl-tg.id"
    sbatch "${one[@]}" --time=1 --signal=B:USR1@55 --output="$tmp/tl-sp.out" \
        slurm/spectral.sbatch "$tmp/sp.toml" "$tmp/tl-sp" > "$tmp/tl-sp.id"
) &
tl_submit=$!

echo "== 2. scancel --signal=USR1 (then, vortex run: a KILL of the run): requeued, continued"
sc_tg=$(sbatch "${one[@]}" --time=10 --output="$tmp/sc-tg.out" \
    slurm/run.sbatch "$tmp/tg-short.toml" "$tmp/sc-tg")
sc_sp=$(sbatch "${one[@]}" --time=10 --output="$tmp/sc-sp.out" \
    slurm/spectral.sbatch "$tmp/sp-short.toml" "$tmp/sc-sp")
echo "== 3. a bad configuration: the job ends at once, not requeued"
sed 's/^nu = .*/nu = -1.0/' "$tmp/tg-short.toml" > "$tmp/bad.toml"
bad=$(sbatch "${one[@]}" --time=10 --output="$tmp/bad.out" slurm/run.sbatch "$tmp/bad.toml" "$tmp/bad")
echo "== 4. two tasks of one job, under mpirun and under srun (PMIx) (CPU build)"
two=(--parsable --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0 --time=10)
mp=$(VORTEX_LAUNCH="mpirun --oversubscribe" sbatch "${two[@]}" --output="$tmp/mp.out" \
    slurm/run.sbatch "$tmp/tg-short.toml" "$tmp/mp")
sr=$(sbatch "${two[@]}" --output="$tmp/sr.out" slurm/run.sbatch "$tmp/tg-short.toml" "$tmp/sr")
echo "== 5. a sweep: a job array over three viscosities (Reynolds numbers), then the table"
sed -e 's/^t_end = .*/t_end = 0.5/' "$tmp/tg.toml" > "$tmp/sweep.toml"
read -r arr tab < <(slurm/sweep.sh "$tmp/sweep.toml" "$tmp/sweep" nu 0.05 0.04 0.03 -- \
    --nodes=1 --ntasks=1 --cpus-per-task=1 --gpus-per-node=0 --time=10 | tail -1)
echo "   array job $arr, table job $tab"

echo "== 2. (signals) USR1 once the runs have made steps"
wait_lines "$tmp/sc-tg/timing.csv" 3
scancel --signal=USR1 "$sc_tg"
wait_lines "$tmp/sc-sp/energy.csv" 3
scancel --signal=USR1 "$sc_sp"
for _ in $(seq 600); do [ "$(restarts "$sc_tg")" = 1 ] && [ "$(state "$sc_tg")" = RUNNING ] && break; sleep 0.1; done
# vortex status of the running job: running, its pid and host, steps done, s/step, time to go
for _ in $(seq 100); do
    "$bin" status --json "$tmp/sc-tg" > "$tmp/st.json"
    grep -q '"state": "running"' "$tmp/st.json" && break
    sleep 0.1
done
"$bin" status "$tmp/sc-tg"
python3 - "$tmp/st.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))[0]
assert s["state"] == "running" and s["invocations"] == 2, s
assert s["steps"] == 80 and s["step"] >= 1 and s["s_per_step"] > 0 and s["to_go_s"] > 0, s
PY
# a checkpoint written by the second job, then the run killed between two checkpoints
ck=$(stat -c %Y.%i "$tmp/sc-tg/checkpoint.bin")
for _ in $(seq 600); do [ "$(stat -c %Y.%i "$tmp/sc-tg/checkpoint.bin")" != "$ck" ] && break; sleep 0.1; done
# (SIGKILL of the run's process, as Slurm's KILL after the grace or the OOM killer deliver it;
# `scancel --signal=KILL` would cancel the whole job)
for p in $(pgrep -f -- "--out $tmp/sc-tg"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = vortex ] && kill -KILL "$p"
done
wait "$ref_tg" || { cat "$tmp/ref-tg.log"; exit 1; }
wait "$ref_sp" || { cat "$tmp/ref-sp.log"; exit 1; }
echo "   the references took $(($(date +%s) - t0)) s since the start"
for j in "$sc_tg:sc-tg:diagnostics.csv:ref-tg:2" "$sc_sp:sc-sp:energy.csv:ref-sp:1"; do
    IFS=: read -r job name csv ref n <<< "$j"
    wait_end "$job" 300
    grep -E "^chain:" "$tmp/$name.out"
    test "$(state "$job")" = COMPLETED
    test "$(restarts "$job")" -eq "$n"
    grep -q "interrupted with a checkpoint (status 75).*requeueing" "$tmp/$name.out"
    cmp_last "$tmp/$name/$csv" "$tmp/$ref/$csv" 1e-12
done
grep -q "killed (status" "$tmp/sc-tg.out"

echo "== 3. (the bad configuration)"
wait_end "$bad" 120
grep -E "^chain:|error" "$tmp/bad.out"
test "$(state "$bad")" = FAILED && test "$(restarts "$bad")" -eq 0
grep -q "chain: the run failed (status 1): not requeued" "$tmp/bad.out"

echo "== 4. (two tasks) the rows of one rank"
for j in "$mp:mp" "$sr:sr"; do
    IFS=: read -r job name <<< "$j"
    wait_end "$job" 300
    test "$(state "$job")" = COMPLETED
    python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['invocations'][-1]; assert r['ranks'] == 2, r['ranks']" "$tmp/$name/run.json"
    test -f "$tmp/$name/checkpoint.manifest"
    # (several ranks sum in another order: 1e-9, as crates/method/ci-mpi.sh with re-interpolations)
    cmp_last "$tmp/$name/diagnostics.csv" "$tmp/ref-tg/diagnostics.csv" 1e-9
done

echo "== 5. (the sweep) the table and vortex status"
wait_end "$tab" 300
cat "$tmp/sweep/table.csv"
test "$(state "$tab")" = COMPLETED
test "$(grep -c ',completed,' "$tmp/sweep/table.csv")" -eq 3
"$bin" status "$tmp/sweep" | tee "$tmp/status.txt"
test "$(grep -c ' ended ' "$tmp/status.txt")" -eq 3
"$bin" status --json "$tmp/sweep" | python3 -c "import json,sys; r=json.load(sys.stdin); assert [x['state'] for x in r] == ['ended'] * 3, r"

echo "== 1. (the time limit) the chains to t_end"
wait "$tl_submit"
tl_tg=$(cat "$tmp/tl-tg.id")
tl_sp=$(cat "$tmp/tl-sp.id")
for j in "$tl_tg:tl-tg:diagnostics.csv:ref-tg" "$tl_sp:tl-sp:energy.csv:ref-sp"; do
    IFS=: read -r job name csv ref <<< "$j"
    wait_end "$job" 600
    grep -E "^chain:" "$tmp/$name.out"
    test "$(state "$job")" = COMPLETED
    # USR1 from the time limit (nothing else signals these jobs), status 75 and a requeue
    test "$(restarts "$job")" -ge 1
    grep -q "chain: USR1 at" "$tmp/$name.out"
    grep -q "interrupted with a checkpoint (status 75).*requeueing" "$tmp/$name.out"
    cmp_last "$tmp/$name/$csv" "$tmp/$ref/$csv" 1e-12
done
"$bin" status "$tmp/tl-tg" "$tmp/tl-sp"
echo "slurm/ci.sh: the batch scripts under Slurm passed in $(($(date +%s) - t0)) s"

#!/usr/bin/env bash
# The hostile-input cases of validation/robustness/README.md ("Collisions, sizes, restarts,
# absurd values"), each run against the binary: prints one Markdown row per case (the exit
# status and the first error line) and fails when a case panics (101), aborts (134), is killed
# (137), succeeds where it must be refused, or gives an error that does not name its cause.
#
#   bash validation/robustness/hostile_inputs.sh [path/to/vortex]     (about 70 s on 2 cores)
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-${CARGO_TARGET_DIR:-target}/release/vortex}
[ -x "$bin" ] || { echo "no binary at $bin (cargo build --release)"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export RUST_LOG=warn
fails=0

tg() { # a Taylor-Green run on 6^3 particles: tg DT T_END [extra lines]
    printf 'nu = 0.05\ndt = %s\nt_end = %s\n[domain]\nperiodic = true\nimage_levels = 1\n[evaluation]\nmethod = "fmm"\norder = 6\n[initial]\nkind = "taylor-green"\nn = 6\n%s\n[output]\ndiagnostics_every = 5\nprogress = false\nplots = false\n' "$1" "$2" "${3:-}"
}
sp() { # a spectral run on 16^3: sp [top-level lines] [initial lines]
    printf 'n = 16\nnu = 0.01\nt_end = 0.2\ndt = 0.01\nthreads = 1\nbackend = "cpu"\n%b\n[initial]\nkind = "taylor-green"\n%b\n' "${1:-}" "${2:-}"
}
ring() { # a free vortex ring: ring CORE CENTER
    printf 'nu = 0.001\ndt = 0.01\nt_end = 0.02\n[domain]\nperiodic = false\n[initial]\nkind = "ring"\nradius = 1.0\ncirculation = 1.0\ncore = %s\nspacing = 0.1\ncenter = %s\n[output]\nprogress = false\n' "$1" "$2"
}

# case NAME WANT(refused|ok) PATTERN -- COMMAND...: runs COMMAND (killed after 60 s: a hang),
# checks the outcome
case_() {
    local name=$1 want=$2 pat=$3
    shift 4
    local err rc line
    err=$(timeout -s KILL 60 "$@" 2>&1 >/dev/null)
    rc=$?
    line=$(printf '%s\n' "$err" | grep -m1 -E "error|${pat:-WARN}" | cut -c1-160 | tr '|' '/')
    local verdict=ok
    case $rc in 101 | 134) verdict="PANIC/ABORT" ;; 137) verdict="HANG (killed after 60 s) or OOM" ;; esac
    if [ "$want" = refused ] && [ $rc -ne 1 ]; then verdict="$verdict; NOT REFUSED"; fi
    if [ "$want" = ok ] && [ $rc -ne 0 ]; then verdict="$verdict; FAILED"; fi
    if [ -n "$pat" ] && ! printf '%s' "$err" | grep -q -- "$pat"; then verdict="$verdict; cause not named ($pat)"; fi
    verdict=${verdict#ok; }
    [ "$verdict" = ok ] || fails=$((fails + 1))
    echo "| $name | $rc | ${line:-(none)} | $verdict |"
}

# ... | cfg NAME: writes the configuration on stdin to a file, prints its path
cfg() {
    cat >"$tmp/$1.toml"
    echo "$tmp/$1.toml"
}

# check NAME CONDITION-COMMAND...: a row for a condition checked after a case (e.g. the files
# left in a directory)
check() {
    local name=$1
    shift
    if "$@"; then
        echo "| $name | - | - | ok |"
    else
        fails=$((fails + 1))
        echo "| $name | - | - | FAILED |"
    fi
}

# status OUT: the status of the last invocation in OUT/run.json
status() {
    python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['invocations'][-1]['status'])" "$1/run.json" 2>/dev/null
}

tg 0.1 1.0 >"$tmp/tg.toml"
sp >"$tmp/sp.toml"
"$bin" particles --n 200 --out "$tmp/p.npy" 2>/dev/null

echo "| case | exit | first error or warning line | verdict |"
echo "|---|---|---|---|"
# two starts at the same moment into one empty directory, 5 times for each solver
for cmd in run spectral; do
    cfg=$tmp/tg.toml; [ $cmd = spectral ] && cfg=$tmp/sp.toml
    for i in 1 2 3 4 5; do
        out=$tmp/c_${cmd}_$i
        "$bin" $cmd "$cfg" --out "$out" 2>"$out.e1" >/dev/null & p1=$!
        "$bin" $cmd "$cfg" --out "$out" 2>"$out.e2" >/dev/null & p2=$!
        wait $p1; r1=$?; wait $p2; r2=$?
        n=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['invocations']))" "$out/run.json")
        verdict=ok
        if [ $((r1 == 0)) -eq $((r2 == 0)) ] || [ "$n" != 1 ]; then verdict="BOTH OR NEITHER RAN"; fails=$((fails + 1)); fi
        loser=$(grep -h -m1 error "$out.e1" "$out.e2" | cut -c1-120)
        echo "| two \`$cmd\` into one directory ($i) | $r1 / $r2 | $loser | $verdict |"
    done
done
"$bin" run "$tmp/tg.toml" --out "$tmp/a" >/dev/null 2>&1
"$bin" run "$tmp/tg.toml" --out "$tmp/b" >/dev/null 2>&1
case_ "--restart into another run's directory" refused "not one of its checkpoints" -- "$bin" run "$tmp/tg.toml" --out "$tmp/b" --restart "$tmp/a/checkpoint.bin"
case_ "--restart with t_end at the checkpoint's time" refused "at or before the checkpoint" -- "$bin" run "$tmp/tg.toml" --out "$tmp/a" --restart "$tmp/a/checkpoint.bin"
"$bin" spectral "$tmp/sp.toml" --out "$tmp/s" >/dev/null 2>&1
case_ "spectral --restart with t_end at the checkpoint's time" refused "at or before the checkpoint" -- "$bin" spectral "$tmp/sp.toml" --out "$tmp/s" --restart "$tmp/s/checkpoint.bin"
"$bin" eval --particles "$tmp/p.npy" --out "$tmp/e" --backend cpu >/dev/null 2>&1
case_ "eval over an earlier result" refused "--overwrite" -- "$bin" eval --particles "$tmp/p.npy" --out "$tmp/e" --backend cpu
case_ "eval --overwrite" ok "" -- "$bin" eval --particles "$tmp/p.npy" --out "$tmp/e" --backend cpu --overwrite
sp | sed 's/^n = 16/n = 4096/' >"$tmp/big.toml"
case_ "spectral n = 4096" refused "GiB" -- "$bin" spectral "$tmp/big.toml" --out "$tmp/big"
case_ "bench spectral --n 4096" refused "GiB" -- "$bin" bench spectral --n 4096 --backend cpu
case_ "bench fmm --n 1e11" refused "GiB" -- "$bin" bench fmm --n 1e11 --backend cpu
case_ "bench fmm --n 1.5" refused "whole number" -- "$bin" bench fmm --n 1.5 --backend cpu
case_ "bench m2l --orders 0..3" refused "outside 1..=20" -- "$bin" bench m2l --orders 0..3
case_ "bench m2l --orders 25..26" refused "outside 1..=20" -- "$bin" bench m2l --orders 25..26
printf 'nu = 0.05\ndt = 0.1\nt_end = 0.2\n[domain]\nperiodic = true\n[initial]\nkind = "taylor-green"\nn = 6\n[output]\ngrid = 100000\nprogress = false\n' >"$tmp/grid.toml"
case_ "output.grid = 100000" refused "output.grid" -- "$bin" run "$tmp/grid.toml" --out "$tmp/grid"
python3 - "$tmp/p.npy" "$tmp/lie.npy" <<'PY'
import sys
b = open(sys.argv[1], "rb").read()
h = b[:128].decode("latin1").replace("(200, 7)", "(90000000000, 7)")
nl = h.index("\n")
h = h[: nl - 8] + h[nl:]
open(sys.argv[2], "wb").write(h.encode("latin1") + b[128:])
PY
case_ ".npy header claiming more data than the file" refused "header claims shape" -- "$bin" eval --particles "$tmp/lie.npy" --out "$tmp/lie"
case_ "core = 1e-300" refused "initial.core" -- "$bin" run "$(ring 1e-300 "[0.0, 0.0, 0.0]" | cfg r1)" --out "$tmp/r1"
case_ "ring centre NaN" refused "initial.center" -- "$bin" run "$(ring 0.1 "[nan, 0.0, 0.0]" | cfg r2)" --out "$tmp/r2"
case_ "ring centre 1e200" refused "initial.center" -- "$bin" run "$(ring 0.1 "[1e200, 0.0, 0.0]" | cfg r3)" --out "$tmp/r3"
case_ "amplitude = nan" refused "initial.amplitude" -- "$bin" spectral "$(sp "" "amplitude = nan" | cfg a1)" --out "$tmp/a1"
case_ "amplitude = 1e200" refused "initial.amplitude" -- "$bin" spectral "$(sp "" "amplitude = 1e200" | cfg a2)" --out "$tmp/a2"
case_ "amplitude = 0 (inf/NaN scales)" refused "initial.amplitude" -- "$bin" spectral "$(sp "" "amplitude = 0.0" | cfg a3)" --out "$tmp/a3"
case_ "spectrum time -1" refused "spectrum_times" -- "$bin" spectral "$(sp "spectrum_times = [-1.0]" | cfg a4)" --out "$tmp/a4"
case_ "diagnostics_interval below dt" refused "diagnostics_interval" -- "$bin" spectral "$(sp "diagnostics_interval = 1e-5" | cfg a5)" --out "$tmp/a5"
case_ "--threads 5000" ok "capped" -- "$bin" run "$tmp/tg.toml" --out "$tmp/t5000" --threads 5000
tg 1e-9 1.0 >"$tmp/slow.toml"
case_ "dt = 1e-9 (announced, then --steps 1)" ok "long run" -- "$bin" run "$tmp/slow.toml" --out "$tmp/slow" --steps 1

# -- runs that never hang, never guess and never delete what is not theirs --
# panics: an absurd overlap, closed pipes (the work is done, run.json records the outcome)
case_ "initial.overlap = 1e308 (capacity overflow)" refused "initial.overlap" -- "$bin" run "$(tg 0.1 0.2 "overlap = 1e308" | cfg ov)" --out "$tmp/ov"
pipe_case() { # pipe_case NAME OUT -- COMMAND...: stdout and stderr into a pipe closed at once
    local name=$1 out=$2
    shift 3
    timeout -s KILL 60 "$@" 2>&1 | true
    local rc=${PIPESTATUS[0]} verdict=ok
    case $rc in 0) ;; 137) verdict="HANG" ;; *) verdict="exit $rc (101: panic)" ;; esac
    if [ -n "$out" ] && [ "$(status "$out")" != completed ]; then verdict="$verdict; run.json: $(status "$out")"; fi
    [ "$verdict" = ok ] || fails=$((fails + 1))
    echo "| $name | $rc | - | $verdict |"
}
pipe_case "run, stdout and stderr closed" "$tmp/p1" -- "$bin" run "$tmp/tg.toml" --out "$tmp/p1"
pipe_case "spectral, stdout and stderr closed" "$tmp/p2" -- "$bin" spectral "$tmp/sp.toml" --out "$tmp/p2"
# stdout is the product of `config` and `bench`: a closed pipe or a full disk is an error
# (exit 1 with the cause when stderr is open), never a panic and never a success
closed_stdout() { # closed_stdout NAME -- COMMAND...: stdout a pipe whose reader is gone
    local name=$1
    shift 2
    local rc verdict=ok
    python3 -c '
import os, subprocess, sys
r, w = os.pipe()
os.close(r)
sys.exit(subprocess.call(sys.argv[1:], stdout=w, timeout=60))' "$@" 2>"$tmp/closed.err"
    rc=$?
    [ $rc -eq 1 ] || verdict="exit $rc (want 1; 101: panic, 0: success with nothing read)"
    grep -q "standard output" "$tmp/closed.err" || verdict="$verdict; cause not named"
    [ "$verdict" = ok ] || fails=$((fails + 1))
    echo "| $name | $rc | $(grep -m1 error "$tmp/closed.err" | cut -c1-120) | $verdict |"
}
closed_stdout "bench m2l into a closed pipe" -- "$bin" bench m2l --count 100 --orders 2..12
closed_stdout "config --defaults into a closed pipe" -- "$bin" config --defaults
closed_stdout "bench reinterp into a closed pipe (a panic)" -- "$bin" bench reinterp --n 8 --backend cpu --samples 10 --repeat 1
for cmd in "config --defaults vortex" "bench m2l --count 100 --orders 2..4" "bench reinterp --n 8 --backend cpu --samples 10 --repeat 1"; do
    # shellcheck disable=SC2086
    case_ "$cmd > /dev/full" refused "No space left" -- sh -c "\"\$0\" $cmd > /dev/full" "$bin"
done
# inputs refused by type and by header before anything is read or allocated
mkfifo "$tmp/fifo"
case_ "configuration is a FIFO" refused "FIFO" -- "$bin" run "$tmp/fifo" --out "$tmp/f1"
case_ "spectral configuration is a FIFO" refused "FIFO" -- "$bin" spectral "$tmp/fifo" --out "$tmp/f2"
case_ "--restart a FIFO" refused "FIFO" -- "$bin" run "$tmp/tg.toml" --out "$tmp/f3" --restart "$tmp/fifo"
case_ "--restart /dev/urandom" refused "character device" -- "$bin" run "$tmp/tg.toml" --out "$tmp/f4" --restart /dev/urandom
case_ "spectral --restart /dev/zero" refused "character device" -- "$bin" spectral "$tmp/sp.toml" --out "$tmp/f5" --restart /dev/zero
case_ "eval --particles /dev/zero" refused "character device" -- "$bin" eval --particles /dev/zero --out "$tmp/f6"
truncate -s 100G "$tmp/big.bin"
case_ "--restart a sparse 100 GB non-checkpoint" refused "wrong magic bytes" -- "$bin" run "$tmp/tg.toml" --out "$tmp/f7" --restart "$tmp/big.bin"
python3 - "$tmp/a/checkpoint.bin" "$tmp/lie.bin" <<'PY'
import struct, sys
head = open(sys.argv[1], "rb").read(28)
with open(sys.argv[2], "wb") as f:  # the header of a real checkpoint, 4 GiB of holes
    f.write(head[:12] + struct.pack("<Q", 1 << 40) + head[20:28])
    f.truncate(4 << 30)
PY
case_ "--restart a sparse 4 GiB file with a valid header" refused "header says" -- "$bin" run "$tmp/tg.toml" --out "$tmp/f8" --restart "$tmp/lie.bin"
# hangs: the energy plot of a field decaying towards 0, checkpoint rotation, adaptive steps
case_ "spectral energy decaying to 1e-130 (plots finish)" ok "" -- "$bin" spectral "$(sp | sed 's/^nu = 0.01/nu = 40.0/; s/^t_end = 0.2/t_end = 1.0/; s/^dt = 0.01/dt = 0.05/' | cfg h1)" --out "$tmp/h1"
case_ "spectral nu = 1000 (energy underflows)" refused "nu" -- "$bin" spectral "$(sp | sed 's/^nu = 0.01/nu = 1000.0/; s/^t_end = 0.2/t_end = 1.0/' | cfg h2)" --out "$tmp/h2"
case_ "checkpoints_kept = 1000000000" refused "checkpoints_kept" -- "$bin" spectral "$(sp "checkpoints_kept = 1000000000" | cfg h3)" --out "$tmp/h3"
case_ "output.checkpoints_kept = 100000000" refused "checkpoints_kept" -- "$bin" run "$(tg 0.1 0.2 "" | sed 's/^\[output\]/[output]\ncheckpoints_kept = 100000000/' | cfg h4)" --out "$tmp/h4"
case_ "cfl = 1e-9" refused "cfl" -- "$bin" spectral "$(sp | sed 's/^dt = 0.01/cfl = 1e-9/' | cfg h5)" --out "$tmp/h5"
case_ "cfl = 0.5 (adaptive step announced)" ok "adaptive steps" -- env RUST_LOG=info "$bin" spectral "$(sp | sed 's/^dt = 0.01/cfl = 0.5/' | cfg h6)" --out "$tmp/h6"
python3 -c "print('spectrum_times = [' + ','.join('%.6f' % (i * 1e-6) for i in range(1, 200001)) + ']')" >"$tmp/times.txt"
case_ "200000 spectrum_times 1e-6 apart" refused "spectrum_times" -- "$bin" spectral "$(sp "$(cat "$tmp/times.txt")" | cfg h7)" --out "$tmp/h7"
times=$(python3 -c "print(','.join('%.3f' % (i * 1e-3) for i in range(1, 201)))")
case_ "spectrum_times 1e-3 apart with dt = 0.01 (announced)" ok "instead of" -- "$bin" spectral "$(sp "spectrum_times = [$times]" | cfg h8)" --out "$tmp/h8"
announced() { # announced NAME PATTERN -- COMMAND...: the estimate is logged within 10 s
    local name=$1 pat=$2
    shift 3
    RUST_LOG=info "$@" 2>"$tmp/announced.err" >/dev/null & local pid=$!
    for _ in $(seq 100); do grep -q -- "$pat" "$tmp/announced.err" && break; sleep 0.1; done
    kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null
    local line verdict=ok
    line=$(grep -m1 -- "$pat" "$tmp/announced.err" | cut -c1-160 | tr '|' '/')
    [ -n "$line" ] || { verdict="NOT ANNOUNCED"; fails=$((fails + 1)); }
    echo "| $name | - | ${line:-(none)} | $verdict |"
}
announced "bench m2l --count 300000000 announced" "estimated" -- "$bin" bench m2l --orders 8 --count 300000000
announced "bench spectral --steps 1000000 announced" "estimated" -- "$bin" bench spectral --n 16 --steps 1000000 --backend cpu
announced "bench fmm --repeat 100000 announced" "estimated" -- "$bin" bench fmm --n 20000 --orders 4 --repeat 100000 --backend cpu
# a SIGTERM is acknowledged at once and the run stops at its step's end
tg 0.01 100.0 >"$tmp/long.toml"
"$bin" run "$tmp/long.toml" --out "$tmp/sig" 2>"$tmp/sig.err" >/dev/null & pid=$!
for _ in $(seq 100); do [ -f "$tmp/sig/config.toml" ] && break; sleep 0.05; done
sleep 0.5; kill -TERM $pid; t0=$(date +%s.%N)
wait $pid; rc=$?; took=$(echo "$(date +%s.%N) - $t0" | bc)
verdict=ok
if [ $rc -ne 75 ] || ! grep -q "signal 15 received" "$tmp/sig.err" || [ "$(echo "$took > 10" | bc)" = 1 ]; then verdict=FAILED; fails=$((fails + 1)); fi
echo "| SIGTERM during a run: acknowledged, exit 75 after ${took} s | $rc | $(grep -m1 'signal 15 received' "$tmp/sig.err" | cut -c1-120) | $verdict |"
# silent wrong: near-zero fields, eval into a run's directory, counts that make no work
case_ "amplitude = 1e-300" refused "initial.amplitude" -- "$bin" spectral "$(sp "" "amplitude = 1e-300" | cfg s1)" --out "$tmp/s1"
case_ "isotropic re_lambda = 1e-300" refused "initial.re_lambda" -- "$bin" spectral "$(sp | sed 's/^kind = "taylor-green"/kind = "isotropic"\nk_peak = 3.0\nseed = 1\nre_lambda = 1e-300/' | cfg s2)" --out "$tmp/s2"
case_ "eval --out a run's directory" refused "does not write" -- "$bin" eval --particles "$tmp/p.npy" --out "$tmp/a" --backend cpu
case_ "eval --out a run's directory --overwrite" refused "does not write" -- "$bin" eval --particles "$tmp/p.npy" --out "$tmp/a" --backend cpu --overwrite
case_ "bench fmm --samples 0" refused "\-\-samples 0" -- "$bin" bench fmm --n 1000 --orders 4 --samples 0 --backend cpu
case_ "bench fmm --repeat 0" refused "\-\-repeat 0" -- "$bin" bench fmm --n 1000 --orders 4 --repeat 0 --backend cpu
case_ "bench spectral --steps 0" refused "\-\-steps 0" -- "$bin" bench spectral --n 8 --steps 0 --backend cpu
case_ "bench m2l --count 0" refused "\-\-count 0" -- "$bin" bench m2l --count 0
# data loss: --overwrite keeps what the earlier run did not write; colliding names; particles
tg 0.1 0.2 "" | sed 's/^\[output\]/[output]\nsnapshot_every = 1/' >"$tmp/snap.toml"
"$bin" run "$tmp/snap.toml" --out "$tmp/d1" >/dev/null 2>&1
echo "mine" >"$tmp/d1/notes.txt"; cp "$tmp/p.npy" "$tmp/d1/my_particles.npy"; mkdir "$tmp/d1/mine"
case_ "run --overwrite over a run with a user's files" ok "kept 3 entries" -- "$bin" run "$tmp/tg.toml" --out "$tmp/d1" --overwrite
check "  the user's files kept, the earlier snapshot removed" test -f "$tmp/d1/notes.txt" -a -f "$tmp/d1/my_particles.npy" -a -d "$tmp/d1/mine" -a ! -f "$tmp/d1/particles_000001.vtp"
"$bin" spectral "$tmp/sp.toml" --out "$tmp/d2" >/dev/null 2>&1
echo "mine" >"$tmp/d2/notes.txt"
case_ "spectral --overwrite over a run with a user's file" ok "kept 1 entries" -- "$bin" spectral "$tmp/sp.toml" --out "$tmp/d2" --overwrite
check "  the user's file kept" test -f "$tmp/d2/notes.txt"
case_ "spectrum_times 0.10001, 0.10002 (one file name)" refused "spectrum_times" -- "$bin" spectral "$(sp "spectrum_times = [0.10001, 0.10002, 0.10003]" | cfg d3)" --out "$tmp/d3"
case_ "field_times 0.10001, 0.10002 (one file name)" refused "field_times" -- "$bin" spectral "$(sp "field_times = [0.10001, 0.10002]" | cfg d4)" --out "$tmp/d4"
"$bin" particles --n 500 --out "$tmp/keep.npy" 2>/dev/null
case_ "particles --out an existing file" refused "--overwrite" -- "$bin" particles --n 10 --out "$tmp/keep.npy"
check "  the existing particle file kept" test "$(stat -c %s "$tmp/keep.npy")" -gt 20000
case_ "particles --out an existing file --overwrite" ok "" -- "$bin" particles --n 10 --out "$tmp/keep.npy" --overwrite
# wrong refusals: a restart with a default written out, and the reverse
sp | sed 's/^t_end = 0.2/t_end = 0.4/' >"$tmp/sp_long.toml"
sp "" "amplitude = 1.0" | sed 's/^t_end = 0.2/t_end = 0.4/' >"$tmp/sp_long_a.toml"
case_ "spectral restart with amplitude = 1.0 written out" ok "" -- "$bin" spectral "$tmp/sp_long_a.toml" --out "$tmp/s" --restart "$tmp/s/checkpoint.bin"
sp "" "amplitude = 1.0" >"$tmp/sp_a.toml"
"$bin" spectral "$tmp/sp_a.toml" --out "$tmp/s_c" >/dev/null 2>&1
case_ "spectral restart with amplitude left out" ok "" -- "$bin" spectral "$tmp/sp_long.toml" --out "$tmp/s_c" --restart "$tmp/s_c/checkpoint.bin"
# vague errors made specific: each names its key and the reason
case_ "nu = 1e308 (Taylor-Green)" refused "\`nu\`: 1e308" -- "$bin" run "$(tg 0.1 0.2 "" | sed 's/^nu = 0.05/nu = 1e308/' | cfg v1)" --out "$tmp/v1"
case_ "nu = 1000 (Taylor-Green)" refused "core spreading" -- "$bin" run "$(tg 0.1 0.2 "" | sed 's/^nu = 0.05/nu = 1000.0/' | cfg v2)" --out "$tmp/v2"
case_ "circulation = 1e-300" refused "initial.circulation" -- "$bin" run "$(ring 0.1 "[0.0, 0.0, 0.0]" | sed 's/^circulation = 1.0/circulation = 1e-300/' | cfg v3)" --out "$tmp/v3"
case_ "dt_max = inf" refused "dt_max" -- "$bin" spectral "$(sp "dt_max = inf" | sed 's/^dt = 0.01/cfl = 0.5/' | cfg v4)" --out "$tmp/v4"
case_ "reinterpolation.tolerance = 1e-300" refused "reinterpolation.tolerance" -- "$bin" run "$(tg 0.1 0.2 "" | sed 's/^\[output\]/[reinterpolation]\nsolver = "cg"\ntolerance = 1e-300\nmax_iterations = 100000\n[output]/' | cfg v5)" --out "$tmp/v5"
case_ "spectral as one of 2 ranks" refused "one of 2 ranks" -- env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 "$bin" spectral "$tmp/sp.toml" --out "$tmp/v6"
# the re-probe's variants: sizes and peaks beyond the lattice, an unwritable output, f32 data
case_ "isotropic k_peak = 1e9 (beyond n/2)" refused "initial.k_peak" -- "$bin" run "$(printf 'nu = 0.01\ndt = 0.01\nt_end = 0.1\n[domain]\nperiodic = true\n[initial]\nkind = "isotropic"\nn = 8\nk_peak = 1e9\nre_lambda = 20.0\nseed = 1\n' | cfg rp1)" --out "$tmp/rp1"
case_ "initial.n = 1000000000 (memory)" refused "initial.n = 1000000000" -- "$bin" run "$(tg 0.1 0.2 "" | sed 's/^n = 6/n = 1000000000/' | cfg rp2)" --out "$tmp/rp2"
case_ "--out under /proc (cannot be created)" refused "cannot be created" -- "$bin" run "$tmp/tg.toml" --out /proc/vortex-out
python3 -c "
import struct, sys
h = b\"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 7), }\"
h += b' ' * (63 - len(h)) + b'\\n'
sys.stdout.buffer.write(b'\\x93NUMPY\\x01\\x00' + struct.pack('<H', len(h)) + h + struct.pack('<7f', *[0.1] * 7))
" >"$tmp/f32.npy"
case_ "eval of float32 particles" refused "'<f4'" -- "$bin" eval --particles "$tmp/f32.npy" --out "$tmp/rp4" --backend cpu

# -- the third probe (validation/robustness/README.md, "Bounded stops, typed sizes, the
# user's files"): every size bounded where it is parsed, outputs checked, files kept --
case_ "reinterpolation.cutoff = 1e308 (capacity overflow)" refused "reinterpolation.cutoff" -- "$bin" run "$(tg 0.1 0.2 "" | sed 's/^\[output\]/[reinterpolation]\ncutoff = 1e308\n[output]/' | cfg b1)" --out "$tmp/b1"
case_ "reinterpolation.cutoff = 9223372036854775807" refused "reinterpolation.cutoff" -- "$bin" run "$(tg 0.1 0.2 "" | sed 's/^\[output\]/[reinterpolation]\ncutoff = 9223372036854775807\n[output]/' | cfg b2)" --out "$tmp/b2"
case_ "reinterpolation.cutoff = 1e6 (a step of minutes)" refused "reinterpolation.cutoff" -- "$bin" run "$(tg 0.1 0.2 "" | sed 's/^\[output\]/[reinterpolation]\ncutoff = 1e6\n[output]/' | cfg b3)" --out "$tmp/b3"
case_ "ring, reinterpolation.cutoff = 1e308" refused "reinterpolation.cutoff" -- "$bin" run "$(ring 0.1 "[0.0, 0.0, 0.0]" | sed 's/^\[output\]/[reinterpolation]\ncutoff = 1e308\n[output]/' | cfg b4)" --out "$tmp/b4"
case_ "evaluation.core_cutoff = 1e300" refused "evaluation.core_cutoff" -- "$bin" run "$(tg 0.1 0.2 "" | sed 's/^order = 6/order = 6\ncore_cutoff = 1e300/' | cfg b5)" --out "$tmp/b5"
case_ "eval --core-cutoff 1e300" refused "core_cutoff" -- "$bin" eval --particles "$tmp/p.npy" --out "$tmp/b6" --backend cpu --core-cutoff 1e300
case_ "VORTEX_WATCHDOG_SECONDS=1e20 (Duration overflow)" refused "VORTEX_WATCHDOG_SECONDS" -- env VORTEX_WATCHDOG_SECONDS=1e20 "$bin" run "$tmp/tg.toml" --out "$tmp/b7"
case_ "VORTEX_STOP_GRACE_SECONDS=-1" refused "VORTEX_STOP_GRACE_SECONDS" -- env VORTEX_STOP_GRACE_SECONDS=-1 "$bin" spectral "$tmp/sp.toml" --out "$tmp/b8"
for flag in "--overlap=-1" "--overlap=0" "--overlap=NaN" "--overlap=inf" "--growth=1e308" "--samples=0" "--repeat=0"; do
    case_ "bench reinterp $flag" refused "${flag%%=*} ${flag#*=}" -- "$bin" bench reinterp --n 8 --backend cpu "$flag"
done
case_ "bench spectral --check-n 0" refused "\-\-check-n 0" -- "$bin" bench spectral --n 8 --check-n 0 --backend cpu
case_ "bench m2l --count 10000000000000000000 (a week)" refused "\-\-count" -- "$bin" bench m2l --orders 2 --count 10000000000000000000
announced "bench fmm --samples 200000 (the direct reference) announced" "the direct sum" -- "$bin" bench fmm --n 200000 --orders 4 --samples 200000 --backend cpu
case_ "spectral cfl = 0.5, dt_max = 1e-308" refused "dt_max" -- "$bin" spectral "$(sp "dt_max = 1e-308" | sed 's/^dt = 0.01/cfl = 0.5/' | cfg b9)" --out "$tmp/b9"
case_ "spectral re_lambda = 9223372036854775807" refused "initial.re_lambda" -- "$bin" spectral "$(sp | sed 's/^kind = "taylor-green"/kind = "isotropic"\nk_peak = 3.0\nseed = 1\nre_lambda = 9223372036854775807/' | cfg b10)" --out "$tmp/b10"
case_ "isotropic k_peak = 1e-308 (vortex)" refused "initial.k_peak" -- "$bin" run "$(printf 'nu = 0.01\ndt = 0.01\nt_end = 0.1\n[domain]\nperiodic = true\n[initial]\nkind = "isotropic"\nn = 8\nk_peak = 1e-308\nre_lambda = 20.0\nseed = 1\n' | cfg b11)" --out "$tmp/b11"
case_ "isotropic k_peak = 1e-308 (spectral)" refused "initial.k_peak" -- "$bin" spectral "$(sp | sed 's/^kind = "taylor-green"/kind = "isotropic"\nk_peak = 1e-308\nseed = 1\nre_lambda = 20.0/' | cfg b12)" --out "$tmp/b12"
case_ "health.cfl_warn = -1 (vortex)" refused "health.cfl_warn" -- "$bin" run "$(tg 0.1 0.2 "" | sed 's/^\[output\]/[health]\ncfl_warn = -1.0\n[output]/' | cfg b13)" --out "$tmp/b13"
case_ "health.cfl_warn = -1 (spectral)" refused "health.cfl_warn" -- "$bin" spectral "$(sp "[health]\ncfl_warn = -1.0" | cfg b14)" --out "$tmp/b14"
# compare: one process, and never mixed into another directory
sed 's/^n = 6/n = 8/' "$tmp/tg.toml" >"$tmp/tg8.toml"
case_ "compare as one of 2 ranks" refused "one of 2 ranks" -- env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 "$bin" compare "$tmp/tg8.toml" --out "$tmp/cmp"
case_ "compare --out a run's directory --overwrite" refused "does not write" -- "$bin" compare "$tmp/tg8.toml" --out "$tmp/a" --overwrite
check "  the run's directory holds no comparison" test ! -e "$tmp/a/spectral.toml" -a ! -e "$tmp/a/vortex"
# the user's files: --overwrite without run.json, the command's own inputs
mkdir -p "$tmp/u1" "$tmp/u2" "$tmp/u3"
echo "t,energy" >"$tmp/u1/diagnostics.csv"
case_ "run --overwrite, only the user's diagnostics.csv (no run.json)" refused "no readable run.json" -- "$bin" run "$tmp/tg.toml" --out "$tmp/u1" --overwrite
check "  the user's diagnostics.csv kept" grep -q "t,energy" "$tmp/u1/diagnostics.csv"
echo "# mine" >"$tmp/u2/config.toml"
case_ "spectral --overwrite, only the user's config.toml (no run.json)" refused "no readable run.json" -- "$bin" spectral "$tmp/sp.toml" --out "$tmp/u2" --overwrite
check "  the user's config.toml kept" grep -q "# mine" "$tmp/u2/config.toml"
"$bin" eval --particles "$tmp/p.npy" --out "$tmp/u3" --backend cpu >/dev/null 2>&1
case_ "eval --particles D/velocity.npy --out D --overwrite" refused "input" -- "$bin" eval --particles "$tmp/u3/velocity.npy" --out "$tmp/u3" --backend cpu --overwrite
check "  its input kept" test -s "$tmp/u3/velocity.npy"
"$bin" run "$tmp/tg.toml" --out "$tmp/u4" >/dev/null 2>&1
case_ "run D/config.toml --out D --overwrite (its own configuration)" refused "input" -- "$bin" run "$tmp/u4/config.toml" --out "$tmp/u4" --overwrite
check "  its configuration kept" test -s "$tmp/u4/config.toml"
# the blob as documented; a default written out is no change; a link to the own checkpoint
case_ "kind = \"blob\" with its documented keys" ok "" -- "$bin" run "$(printf 'nu = 0.001\ndt = 0.01\nt_end = 0.02\n[domain]\nperiodic = false\n[initial]\nkind = "blob"\nsigma = 0.2\nstrength = [0.0, 0.0, 1.0]\nspacing = 0.1\n[output]\nprogress = false\n' | cfg bl)" --out "$tmp/bl"
"$bin" run "$(tg 0.1 0.2 "" | cfg tg02)" --out "$tmp/dfl" >/dev/null 2>&1
tg 0.1 0.4 "seed = 7" | sed 's/^\[output\]/[reinterpolation]\nn = 6\n[output]/' >"$tmp/tg04d.toml"
case_ "restart with reinterpolation.n = initial.n and an unused seed written" ok "" -- "$bin" run "$tmp/tg04d.toml" --out "$tmp/dfl" --restart "$tmp/dfl"
ring 0.1 "[0.0, 0.0, 0.0]" >"$tmp/rg.toml"
"$bin" run "$tmp/rg.toml" --out "$tmp/rg" >/dev/null 2>&1
ring 0.1 "[0.0, 0.0, 0.0]" | sed 's/^t_end = 0.02/t_end = 0.04/; s/^\[output\]/[reinterpolation]\nspacing = 0.1\n[output]/' >"$tmp/rg2.toml"
case_ "ring restart with reinterpolation.spacing and center written" ok "" -- "$bin" run "$tmp/rg2.toml" --out "$tmp/rg" --restart "$tmp/rg/checkpoint.bin"
"$bin" spectral "$tmp/sp.toml" --out "$tmp/sl" >/dev/null 2>&1
ln -s "$tmp/sl/checkpoint.bin" "$tmp/link.bin"
case_ "spectral --restart a link to the directory's own checkpoint" ok "" -- "$bin" spectral "$tmp/sp_long.toml" --out "$tmp/sl" --restart "$tmp/link.bin"
# a kill -9 between the rotation and the rename: checkpoint.bin.1 and a complete .tmp
sp "checkpoint_interval = 0.1" >"$tmp/k9.toml"
"$bin" spectral "$tmp/k9.toml" --out "$tmp/k9" >/dev/null 2>&1
mv "$tmp/k9/checkpoint.bin" "$tmp/k9/checkpoint.bin.tmp"
sp "checkpoint_interval = 0.1" | sed 's/^t_end = 0.2/t_end = 0.4/' >"$tmp/k9l.toml"
case_ "--restart DIR/checkpoint.bin, missing after a kill (hint)" refused "checkpoint.bin.tmp" -- "$bin" spectral "$tmp/k9l.toml" --out "$tmp/k9" --restart "$tmp/k9/checkpoint.bin"
case_ "--restart DIR takes the newest loadable (.tmp) and says so" ok "checkpoint.bin.tmp" -- env RUST_LOG=info "$bin" spectral "$tmp/k9l.toml" --out "$tmp/k9" --restart "$tmp/k9"
# a signal ends a run in bounded time: at once (grace 0) with the last checkpoint named
tg 0.01 100.0 "" | sed 's/^n = 6/n = 16/; s/^\[output\]/[output]\ncheckpoint_every = 1/' >"$tmp/long1.toml"
VORTEX_STOP_GRACE_SECONDS=0 "$bin" run "$tmp/long1.toml" --out "$tmp/g0" 2>"$tmp/g0.err" >/dev/null & pid=$!
for _ in $(seq 200); do [ -f "$tmp/g0/checkpoint.bin" ] && break; sleep 0.05; done
sleep 0.3 # the checkpoint durable (its directory synced) and reported complete
kill -TERM $pid; t0=$(date +%s.%N)
wait $pid; rc=$?; took=$(echo "$(date +%s.%N) - $t0" | bc)
verdict=ok
if [ $rc -ne 75 ] || ! grep -q "stopped at once" "$tmp/g0.err" || [ "$(echo "$took > 2" | bc)" = 1 ] || [ "$(status "$tmp/g0")" != interrupted ]; then verdict=FAILED; fails=$((fails + 1)); fi
echo "| SIGTERM, grace 0: stopped at once after ${took} s, run.json $(status "$tmp/g0") | $rc | $(grep -m1 'stopped at once' "$tmp/g0.err" | cut -c1-120) | $verdict |"
case_ "  and --restart DIR continues from the named checkpoint" ok "" -- "$bin" run "$tmp/long1.toml" --out "$tmp/g0" --restart "$tmp/g0" --steps 2
# the re-probe's finds: an odd lattice (FFT assertion), a repeat count of weeks, a step limit
# that wrapped around on a restart, a record without an invocation
case_ "reinterpolation.n = 7 (FFT assertion)" refused "reinterpolation.n" -- "$bin" run "$(tg 0.1 0.2 "" | sed 's/^\[output\]/[reinterpolation]\nn = 7\n[output]/' | cfg b15)" --out "$tmp/b15"
case_ "bench reinterp --repeat 18446744073709551615" refused "\-\-repeat" -- "$bin" bench reinterp --n 8 --backend cpu --samples 10 --repeat 18446744073709551615
"$bin" run "$tmp/tg04d.toml" --out "$tmp/wrap" --steps 1 >/dev/null 2>&1
case_ "restart --steps 18446744073709551615 (wrapped to no step)" ok "" -- "$bin" run "$tmp/tg04d.toml" --out "$tmp/wrap" --restart "$tmp/wrap" --steps 18446744073709551615
check "  it ran to t_end" grep -q "^4.0000000000e-1," "$tmp/wrap/diagnostics.csv"
mkdir -p "$tmp/u5"; printf '{ "invocations": [] }' >"$tmp/u5/run.json"; echo "t,E" >"$tmp/u5/energy.csv"
case_ "spectral --overwrite, a run.json without invocations" refused "no readable run.json" -- "$bin" spectral "$tmp/sp.toml" --out "$tmp/u5" --overwrite
check "  the user's energy.csv kept" grep -q "t,E" "$tmp/u5/energy.csv"

# -- the fourth probe (validation/robustness/README.md, "Typed sizes on every command, the
# last record of a stop, outputs that are not files"): new values of the same classes --
# data loss: --out a FIFO (or a device: /dev/full was replaced by a regular file) --overwrite
mkfifo "$tmp/out.fifo"
case_ "particles --out a FIFO --overwrite (the node replaced)" refused "FIFO" -- "$bin" particles --n 10 --out "$tmp/out.fifo" --overwrite
check "  the FIFO kept" test -p "$tmp/out.fifo"
case_ "particles as one of 2 ranks (both wrote one file)" refused "one of 2 ranks" -- env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 "$bin" particles --n 10 --out "$tmp/two.npy"
check "  nothing written" test ! -e "$tmp/two.npy"
ln -s "$tmp/nowhere" "$tmp/dangling"
case_ "particles --out a dangling link --overwrite" refused "link to nothing" -- "$bin" particles --n 10 --out "$tmp/dangling" --overwrite
mkdir -p "$tmp/q1"; echo "mine" >"$tmp/q1/velocity.npy"
case_ "eval --overwrite over a user's velocity.npy (no timing.json)" refused "timing.json" -- "$bin" eval --particles "$tmp/p.npy" --out "$tmp/q1" --backend cpu --overwrite
check "  the user's velocity.npy kept" grep -q mine "$tmp/q1/velocity.npy"
# vague: values of 309 digits, the key not named, a non-finite result without its cause
npy() { # npy FILE ROWS VALUE-OF-ALPHA: an (N, 7) float64 particle file
    python3 - "$@" <<'PY'
import struct, sys
path, n, a = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rows = []
for i in range(n):
    rows += [0.1 * i, 0.05 * i, 0.2, a if a else 0.1 * (i - (n - 1) / 2), -(a if a else 0.1 * (i - (n - 1) / 2)), 0.0, 0.3]
h = "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, 7), }" % n
h = h.encode() + b" " * (63 - len(h)) + b"\n"
open(path, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + struct.pack("<%dd" % len(rows), *rows))
PY
}
short() { # short NAME -- COMMAND...: refused, no number written out in more than 24 characters
    local name=$1
    shift 2
    local err verdict=ok
    err=$(timeout -s KILL 60 "$@" 2>&1 >/dev/null)
    local rc=$?
    [ $rc -eq 1 ] || verdict="exit $rc (want 1)"
    printf '%s' "$err" | grep -qE '[0-9.]{25}' && verdict="$verdict; a number of more than 24 digits"
    verdict=${verdict#ok; }
    [ "$verdict" = ok ] || fails=$((fails + 1))
    echo "| $name | $rc | $(printf '%s\n' "$err" | grep -m1 error | cut -c1-160 | tr '|' '/') | $verdict |"
}
short "dt = 1e308 (shown in 309 digits)" -- "$bin" run "$(tg 1e308 0.3 "" | cfg n1)" --out "$tmp/n1"
short "domain.box_length = 1e-308" -- "$bin" run "$(tg 0.1 0.3 "" | sed 's/^image_levels = 1/image_levels = 1\nbox_length = 1e-308/' | cfg n2)" --out "$tmp/n2"
short "reinterpolation.drop = 1e308" -- "$bin" run "$(tg 0.1 0.3 "" | sed 's/^\[output\]/[reinterpolation]\ndrop = 1e308\n[output]/' | cfg n3)" --out "$tmp/n3"
short "spectral initial.energy = 1e-308" -- "$bin" spectral "$(sp | sed 's/^kind = "taylor-green"/kind = "isotropic"\nseed = 1\nk_peak = 3.0\nenergy = 1e-308/' | cfg n4)" --out "$tmp/n4"
short "bench fmm --n 1e308" -- "$bin" bench fmm --n 1e308 --orders 4 --backend cpu
case_ "spectral t_end = 1e308 (blamed nu alone)" refused "t_end" -- "$bin" spectral "$(sp | sed 's/^t_end = 0.2/t_end = 1e308/' | cfg n5)" --out "$tmp/n5"
npy "$tmp/alpha.npy" 10 1e308
case_ "eval of strengths 1e308 (a non-finite velocity, no cause)" refused "largest strength" -- "$bin" eval --particles "$tmp/alpha.npy" --out "$tmp/n6" --backend cpu
npy "$tmp/per.npy" 10 0
case_ "eval --periodic --box-length 1e308 (a non-finite velocity)" refused "box_length" -- "$bin" eval --particles "$tmp/per.npy" --out "$tmp/n7" --backend cpu --periodic --box-length 1e308
ln -s "$tmp/loop2" "$tmp/loop1"; ln -s "$tmp/loop1" "$tmp/loop2"
case_ "--restart a symbolic link loop (\"does not exist\")" refused "symbolic link" -- "$bin" run "$tmp/tg.toml" --out "$tmp/n8" --restart "$tmp/loop1"
case_ "compare of a 6^3 run (named the twin's n)" refused "initial.n" -- "$bin" compare "$tmp/tg.toml" --out "$tmp/n9"
"$bin" bench fmm --n 1000 --orders 4 --theta 0 --backend cpu >"$tmp/theta.out" 2>/dev/null
check "bench fmm --theta 0: refused before the table's header" test ! -s "$tmp/theta.out"
mkfifo "$tmp/q2.fifo"; mkdir -p "$tmp/q2"; mv "$tmp/q2.fifo" "$tmp/q2/run.json"
case_ "status of a run.json that is a FIFO (\"no run.json\")" refused "FIFO" -- "$bin" status "$tmp/q2"
# silent wrong: a record status the binary does not write, read as running
mkdir -p "$tmp/q3"; printf '{"invocations": [{"status": 1e308, "pid": -1}]}' >"$tmp/q3/run.json"
"$bin" status "$tmp/q3" >"$tmp/q3.out" 2>&1
check "status of a run.json status 1e308: unknown, not running" sh -c "grep -q unknown '$tmp/q3.out' && ! grep -q 'running (pid' '$tmp/q3.out'"
# the record of a stop: a second signal (run.json said running), SIGXCPU (no record). The
# second signal must reach the run while it finishes its step after the first: a 32^3 run
# (steps of tenths of a second) signalled after a measured step, the second signal sent once the
# first is acknowledged
tg 0.01 100.0 "" | sed 's/^n = 6/n = 32/' >"$tmp/long2.toml"
for sigs in "TERM TERM" "XCPU"; do
    out=$tmp/k_${sigs// /_}
    "$bin" run "$tmp/long2.toml" --out "$out" 2>"$out.err" >/dev/null & pid=$!
    for _ in $(seq 400); do
        [ -f "$out/timing.csv" ] && [ "$(wc -l <"$out/timing.csv")" -ge 2 ] && break
        sleep 0.05
    done
    for s in $sigs; do
        kill -$s $pid
        for _ in $(seq 200); do grep -q 'received' "$out.err" && break; sleep 0.01; done
    done
    wait $pid; rc=$?
    want=75; [ "$sigs" = "TERM TERM" ] && want=130
    verdict=ok
    if [ $rc -ne $want ] || [ "$(status "$out")" != interrupted ]; then verdict=FAILED; fails=$((fails + 1)); fi
    echo "| SIG$sigs during a run: exit $want, run.json interrupted | $rc | run.json $(status "$out") | $verdict |"
done

echo
echo "$fails case(s) failed"
[ $fails -eq 0 ]

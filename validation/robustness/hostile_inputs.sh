#!/usr/bin/env bash
# The hostile-input cases of validation/robustness/README.md ("Collisions, sizes, restarts,
# absurd values"), each run against the binary: prints one Markdown row per case (the exit
# status and the first error line) and fails when a case panics (101), aborts (134), is killed
# (137), succeeds where it must be refused, or gives an error that does not name its cause.
#
#   bash validation/robustness/hostile_inputs.sh [path/to/vortex]     (about 10 s on 2 cores)
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

# case NAME WANT(refused|ok) PATTERN -- COMMAND...: runs COMMAND, checks the outcome
case_() {
    local name=$1 want=$2 pat=$3
    shift 4
    local err rc line
    err=$("$@" 2>&1 >/dev/null)
    rc=$?
    line=$(printf '%s\n' "$err" | grep -m1 -E "error|${pat:-WARN}" | cut -c1-160 | tr '|' '/')
    local verdict=ok
    case $rc in 101 | 134 | 137) verdict="PANIC/ABORT" ;; esac
    if [ "$want" = refused ] && [ $rc -ne 1 ]; then verdict="NOT REFUSED"; fi
    if [ "$want" = ok ] && [ $rc -ne 0 ]; then verdict="FAILED"; fi
    if [ -n "$pat" ] && ! printf '%s' "$err" | grep -q -- "$pat"; then verdict="$verdict; cause not named ($pat)"; fi
    [ "$verdict" = ok ] || fails=$((fails + 1))
    echo "| $name | $rc | ${line:-(none)} | $verdict |"
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
case_ "core = 1e-300" refused "initial.core" -- "$bin" run <(ring 1e-300 "[0.0, 0.0, 0.0]") --out "$tmp/r1"
case_ "ring centre NaN" refused "initial.center" -- "$bin" run <(ring 0.1 "[nan, 0.0, 0.0]") --out "$tmp/r2"
case_ "ring centre 1e200" refused "initial.center" -- "$bin" run <(ring 0.1 "[1e200, 0.0, 0.0]") --out "$tmp/r3"
case_ "amplitude = nan" refused "initial.amplitude" -- "$bin" spectral <(sp "" "amplitude = nan") --out "$tmp/a1"
case_ "amplitude = 1e200" refused "initial.amplitude" -- "$bin" spectral <(sp "" "amplitude = 1e200") --out "$tmp/a2"
case_ "amplitude = 0 (inf/NaN scales)" refused "initial.amplitude" -- "$bin" spectral <(sp "" "amplitude = 0.0") --out "$tmp/a3"
case_ "spectrum time -1" refused "spectrum_times" -- "$bin" spectral <(sp "spectrum_times = [-1.0]") --out "$tmp/a4"
case_ "diagnostics_interval below dt" refused "diagnostics_interval" -- "$bin" spectral <(sp "diagnostics_interval = 1e-5") --out "$tmp/a5"
case_ "--threads 5000" ok "capped" -- "$bin" run "$tmp/tg.toml" --out "$tmp/t5000" --threads 5000
tg 1e-9 1.0 >"$tmp/slow.toml"
case_ "dt = 1e-9 (announced, then --steps 1)" ok "long run" -- "$bin" run "$tmp/slow.toml" --out "$tmp/slow" --steps 1
echo
echo "$fails case(s) failed"
[ $fails -eq 0 ]

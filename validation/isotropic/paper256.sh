#!/usr/bin/env bash
# The core paper's Section 5.1 from one command: decaying isotropic turbulence, 256^3 vortex
# particles (runs/vortex-isotropic-256.toml, `vortex run --backend cuda --grid uniform`, the
# particles resident on the GPU) against the 256^3 pseudo-spectral solver
# (runs/isotropic-256.toml, `vortex spectral --backend cuda`), both to t/T = 10, then the report
# validation/isotropic/results/256/README.md (validation/isotropic/paper_report.py).
#
#   validation/isotropic/paper256.sh [--gpus 0,1] [--out DIR] [--results DIR] [--bin PATH]
#   validation/isotropic/paper256.sh --report-only [--results DIR]
#
# --gpus     GPU indices (CUDA_VISIBLE_DEVICES of each run); two or more: the two runs side by
#            side on the first two, one: in sequence (default: every GPU nvidia-smi lists)
# --out      run directories, configurations, logs (default runs/out/paper256): OUT/vortex,
#            OUT/spectral (fields and checkpoints, several GB), OUT/vortex.log, OUT/spectral.log
# --results  the small results, README.md and figures (default validation/isotropic/results/256)
# --bin      the `vortex` binary, built with the `cuda` feature (default target/release/vortex,
#            else `vortex` on the PATH)
# --report-only  only the report from --results (needs matplotlib; scikit-image for the
#                isosurfaces of Fig. 13, which are left out, with the reason, without it)
# --test-size N  a test of the pipeline on the CPU: N^3, T = 0.01 (CI)
#
# A second invocation continues: a finished run (OUT/NAME/finished) is kept, an interrupted one
# (exit status 75: stopped by a signal after its checkpoint) continues with --restart. SIGINT or
# SIGTERM to this script are passed to the runs, which checkpoint and stop; the script then exits
# with 75. Detached: `setsid validation/isotropic/paper256.sh ... > LOG 2>&1 < /dev/null &`; the
# file OUT/paper256.status (written last, `status N`) says it has ended, OUT/results.tar.gz holds
# the results directory. The report needs matplotlib; where it is missing (a GPU node), the
# script stops after `collect` and says how to draw the figures elsewhere from the results.
set -uo pipefail
cd "$(dirname "$0")/../.."
here=validation/isotropic
gpus="" out=runs/out/paper256 results=$here/results/256 bin="" report_only=0 test_size=""
while [ $# -gt 0 ]; do
    case "$1" in
        --gpus) gpus="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --results) results="$2"; shift 2 ;;
        --bin) bin="$2"; shift 2 ;;
        --report-only) report_only=1; shift ;;
        --test-size) test_size="$2"; shift 2 ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "paper256.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

report() {
    if python3 -c "import matplotlib, numpy" 2>/dev/null; then
        python3 $here/paper_report.py report --results "$results" ${test_size:+--check}
    else
        echo "paper256.sh: matplotlib is not installed here: the results are in $results; draw" \
            "the figures where it is: python3 $here/paper_report.py report --results DIR" >&2
        return 3
    fi
}
if [ "$report_only" = 1 ]; then
    report
    exit $?
fi

if [ -z "$bin" ]; then
    bin="${CARGO_TARGET_DIR:-target}/release/vortex"
    [ -x "$bin" ] || bin=$(command -v vortex || true)
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "paper256.sh: no vortex binary (--bin PATH)" >&2; exit 2; }
if [ -z "$gpus" ]; then
    if [ -n "$test_size" ]; then
        gpus=0
    else
        n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
        [ "${n:-0}" -ge 1 ] || { echo "paper256.sh: no GPU (nvidia-smi -L); --gpus LIST" >&2; exit 2; }
        gpus=$(seq -s, 0 $((n - 1)))
    fi
fi
IFS=, read -r -a gpu <<< "$gpus"
mkdir -p "$out" "$results"
rm -f "$out/paper256.status"
tl="$results/timeline.txt"
start=$(date +%s)
mode=$([ ${#gpu[@]} -ge 2 ] && echo "side by side on GPUs ${gpu[0]},${gpu[1]}" \
    || echo "in sequence on GPU ${gpu[0]}")
printf 'start %s\nmode %s\n' "$start" "$mode" > "$tl"

finish() {
    echo "status $1" > "$out/paper256.status"
    echo "paper256.sh: status $1 after $(( $(date +%s) - start )) s"
    exit "$1"
}

# the configurations: as shipped, t_end at t/T = 10 and the outputs of the figures
if [ -n "$test_size" ]; then
    times=$(python3 $here/paper_report.py configs --out "$out" --test-size "$test_size" \
        --turnover 0.01) || finish 1
    backend=(--backend cpu) vgrid=()
else
    times=$(python3 $here/paper_report.py configs --out "$out") || finish 1
    backend=(--backend cuda) vgrid=(--grid uniform)
fi
echo "paper256.sh: comparison times $times; runs $mode; binary $bin; outputs in $out"
{
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv 2>/dev/null \
        || echo "no nvidia-smi"
    echo "host $(hostname), $(nproc) cores, $("$bin" --version)"
} > "$results/machine.txt"

# start_run NAME GPU: the run NAME (vortex | spectral) in the background on GPU, continued from
# its checkpoint where one is there; sets pid[NAME] (none: already finished)
declare -A pid
start_run() {
    local name=$1 dev=$2 dir="$out/$1" extra=()
    if [ -e "$dir/finished" ]; then
        echo "paper256.sh: $name finished earlier ($dir/finished)"
        return 0
    fi
    if [ -e "$dir/checkpoint.bin" ]; then
        extra=(--restart "$dir/checkpoint.bin")
        echo "restart 1" >> "$tl"
    elif [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
        extra=(--overwrite)
    fi
    local cmd
    if [ "$name" = vortex ]; then
        cmd=("$bin" run "$out/vortex.toml" --out "$dir" "${backend[@]}" "${vgrid[@]}" "${extra[@]}")
    else
        cmd=("$bin" spectral "$out/spectral.toml" --out "$dir" "${backend[@]}" --no-progress \
            "${extra[@]}")
    fi
    echo "paper256.sh: CUDA_VISIBLE_DEVICES=$dev ${cmd[*]}" | tee -a "$out/$name.log"
    CUDA_VISIBLE_DEVICES=$dev "${cmd[@]}" >> "$out/$name.log" 2>&1 &
    pid[$name]=$!
}

# wait_run NAME: its exit status (0 when it was not started); marks a finished run
wait_run() {
    local name=$1 p=${pid[$1]:-} rc
    [ -n "$p" ] || return 0
    while :; do
        wait "$p"; rc=$?
        [ $rc -le 128 ] && break
        # a signal to this script interrupted the wait: wait again while the run checkpoints
        kill -0 "$p" 2>/dev/null && continue
        wait "$p" 2>/dev/null; local r2=$?
        [ $r2 -ne 127 ] && rc=$r2
        break
    done
    unset "pid[$name]"
    echo "${name}_end $(date +%s) $rc" >> "$tl"
    [ $rc -eq 0 ] && touch "$out/$name/finished"
    echo "paper256.sh: $name exited with $rc (log $out/$name.log)"
    return $rc
}

stop_runs() {
    echo "paper256.sh: signal: the runs checkpoint and stop" >&2
    stopped=1
    for p in "${pid[@]}"; do kill -TERM "$p" 2>/dev/null; done
}
stopped=0
trap stop_runs INT TERM

if [ ${#gpu[@]} -ge 2 ]; then
    start_run vortex "${gpu[0]}"
    start_run spectral "${gpu[1]}"
    wait_run vortex; rv=$?
    wait_run spectral; rs=$?
else
    start_run spectral "${gpu[0]}"
    wait_run spectral; rs=$?
    rv=0
    if [ "$stopped" = 0 ] && [ $rs -eq 0 ]; then start_run vortex "${gpu[0]}"; wait_run vortex; rv=$?; fi
fi
echo "runs_done $(date +%s)" >> "$tl"
if [ "$stopped" = 1 ] || [ $rv -eq 75 ] || [ $rs -eq 75 ]; then
    echo "paper256.sh: interrupted; the same command continues the runs" >&2
    finish 75
fi
[ $rv -eq 0 ] && [ $rs -eq 0 ] || finish 1

python3 $here/paper_report.py collect --vortex-run "$out/vortex" --spectral-run "$out/spectral" \
    --spectral-log "$out/spectral.log" --results "$results" ${test_size:+--check} || finish 1
echo "collected $(date +%s)" >> "$tl"
tar czf "$out/results.tar.gz" -C "$(dirname "$results")" "$(basename "$results")"
report
rc=$?
[ $rc -eq 0 ] && echo "reported $(date +%s)" >> "$tl"
[ $rc -eq 0 ] && tar czf "$out/results.tar.gz" -C "$(dirname "$results")" "$(basename "$results")"
# no matplotlib here: the results are complete without the figures, unless this is the test
[ $rc -eq 3 ] && [ -z "$test_size" ] && rc=0
finish $rc

#!/usr/bin/env bash
# The runs of validation/taylor-green-1600/README.md on a 4-GPU host, one queue of cases per GPU
# (CUDA_VISIBLE_DEVICES=k), about 8 minutes in all on H100s:
#   GPU 0: Taylor-Green Re 1600 128^3, filter none (stopped by the energy check near t = 6.4;
#          capped at t = 12), then isotropic 64^3 Re_lambda 20 with filter none
#   GPU 1: Taylor-Green Re 1600 128^3 to t = 20 with the default filter (a = 36, m = 36)
#   GPU 2: the same with a = 36, m = 8
#   GPU 3: isotropic 64^3 Re_lambda 20 with the default filter, then with m = 8
# Usage (repository root): bash validation/taylor-green-1600/gpu.sh [BIN] [WORK]
#   BIN: the vortex binary built with --features cuda (default .device/vortex);
#   WORK: the run directories (default /tmp/tg1600). With fewer GPUs the queues share them
#   (queue k on GPU k mod ngpu, one after the other). Each run is cut at LIMIT seconds
#   (default 480). The run directories (without snapshots and checkpoints), the logs and the
#   report built from them go to $OUT/tg1600.tar.gz when OUT is set. Then, here:
#   tar xzf tg1600.tar.gz && python3 validation/taylor-green-1600/compare.py --runs tg1600 --keep
set -u
BIN=${1:-.device/vortex}
WORK=${2:-/tmp/tg1600}
LIMIT=${LIMIT:-480}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
mkdir -p "$WORK"
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$NGPU" -ge 1 ] || NGPU=1

filter() {
    case $1 in
        none) echo '{ kind = "none" }' ;;
        hou-li) echo '{ kind = "exponential", strength = 36.0, order = 36.0 }' ;;
        exp8) echo '{ kind = "exponential", strength = 36.0, order = 8.0 }' ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
}

# tg128 OPTION T_END: the shipped 128^3 configuration with that filter, no snapshots or checkpoints
tg128() {
    local f; f=$(filter "$1")
    sed -e "s/^filter = .*/filter = $f/; s/^t_end = .*/t_end = $2/; s/^snapshot_every = .*/snapshot_every = 0/; s/^checkpoint_every = .*/checkpoint_every = 0/" \
        "$ROOT/runs/vortex-taylor-green-re1600-128.toml" > "$WORK/tg128-$1.toml"
    grep -q "^filter = " "$WORK/tg128-$1.toml" || { echo "no filter line in the 128^3 configuration" >&2; exit 2; }
    echo "$WORK/tg128-$1.toml"
}

# iso20 OPTION: the isotropic 64^3 twin at Re_lambda 20 (validation/isotropic) with that filter
iso20() {
    local f; f=$(filter "$1")
    sed -e "s/^nu = 0.01/nu = 0.02/; s/^re_lambda = 40.0/re_lambda = 20.0/; s/^snapshot_every = .*/snapshot_every = 0/; s/^checkpoint_every = .*/checkpoint_every = 0/; /^\[reinterpolation\]/a filter = $f" \
        "$ROOT/runs/vortex-isotropic-64.toml" > "$WORK/iso20-$1.toml"
    echo "$WORK/iso20-$1.toml"
}

# one NAME CONFIG GPU: a run, its log and exit status in WORK
one() {
    local name=$1 cfg=$2 gpu=$3 t0 rc
    t0=$(date +%s)
    CUDA_VISIBLE_DEVICES=$gpu timeout "$LIMIT" "$BIN" run "$cfg" --out "$WORK/$name" --overwrite \
        --backend cuda --grid uniform > "$WORK/$name.log" 2>&1
    rc=$?
    echo "$name: exit $rc, $(( $(date +%s) - t0 )) s on GPU $gpu" | tee -a "$WORK/summary.txt"
}

queue() {
    local gpu=$(( $1 % NGPU ))
    shift
    for spec in "$@"; do
        local case=${spec%%:*} opt=${spec#*:} cfg
        if [ "$case" = tg128 ]; then
            if [ "$opt" = none ]; then cfg=$(tg128 "$opt" 12.0); else cfg=$(tg128 "$opt" 20.0); fi
        else
            cfg=$(iso20 "$opt")
        fi
        one "$case-$opt" "$cfg" "$gpu"
    done
}

: > "$WORK/summary.txt"
nvidia-smi -L > "$WORK/gpus.txt" 2>&1
pids=()
queue 0 tg128:none iso20:none & pids+=($!)
queue 1 tg128:hou-li & pids+=($!)
queue 2 tg128:exp8 & pids+=($!)
queue 3 iso20:hou-li iso20:exp8 & pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
cat "$WORK/summary.txt"
python3 "$HERE/compare.py" --runs "$WORK" --check 2>&1 | tee "$WORK/table.txt"
if [ -n "${OUT:-}" ]; then
    tar czf "$OUT/tg1600.tar.gz" -C "$(dirname "$WORK")" \
        --exclude='*.vtk' --exclude='*.vtp' --exclude='*.pvd' --exclude='checkpoint.bin*' \
        "$(basename "$WORK")"
    ls -l "$OUT/tg1600.tar.gz"
fi

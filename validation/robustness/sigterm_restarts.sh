#!/bin/bash
# SIGTERM at a random moment, TRIALS times (default 20): each interrupted vortex-method run is
# restarted from its checkpoint until it completes, and its final checkpoint must be identical,
# byte for byte, to that of an uninterrupted run of the same configuration.
# Usage: bash validation/robustness/sigterm_restarts.sh [TRIALS] [VORTEX_BINARY]
set -uo pipefail
trials=${1:-20}
bin=${2:-./target/release/vortex}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$(dirname "$0")/taylor-green-6.toml" "$work/tg.toml"
export RUST_LOG=error
t0=$(date +%s.%N)
"$bin" run "$work/tg.toml" --out "$work/full" || { echo "reference run failed"; exit 1; }
span=$(echo "$(date +%s.%N) - $t0" | bc)
echo "uninterrupted run: ${span} s"
same=0; signalled=0; restarts=0
for i in $(seq 1 "$trials"); do
    out="$work/t$i"
    delay=$(awk -v s="$span" -v r="$RANDOM" 'BEGIN { printf "%.3f", 0.05 + 0.9 * s * r / 32767 }')
    "$bin" run "$work/tg.toml" --out "$out" & pid=$!
    while [[ ! -f "$out/config.toml" ]] && kill -0 "$pid" 2>/dev/null; do sleep 0.005; done
    sleep "$delay"
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"; status=$?
    [[ $status -eq 75 ]] && signalled=$((signalled + 1))
    while [[ $status -eq 75 ]]; do
        restarts=$((restarts + 1))
        "$bin" run "$work/tg.toml" --out "$out" --restart "$out/checkpoint.bin"; status=$?
    done
    if [[ $status -ne 0 ]]; then
        echo "trial $i: exit status $status"
    elif cmp -s "$work/full/checkpoint.bin" "$out/checkpoint.bin"; then
        same=$((same + 1))
    else
        echo "trial $i: final checkpoint differs"
    fi
done
echo "trials $trials, stopped by SIGTERM with status 75: $signalled, restarts: $restarts," \
     "bitwise identical final checkpoints: $same / $trials"
[[ $same -eq $trials ]]

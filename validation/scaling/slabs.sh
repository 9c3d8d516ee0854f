#!/usr/bin/env bash
# The resident step over z slabs on the GPUs of one machine (one rank per GPU, mpirun):
#   invariance  isotropic 64^3 and Taylor-Green Re 1600 128^3, 20 steps on R = 1, 2, 4 GPUs:
#               energy and enstrophy of every step against R = 1 (bound 1e-6, the f32 FMM);
#               10 steps on 2 GPUs, a checkpoint, 10 more on 4 GPUs, against 20 steps on 1
#   scaling     the core paper's case (runs/vortex-isotropic-256.toml, 256^3, p = 10) from one
#               initial checkpoint, STEPS steps on 1, 2, 4 GPUs: mean seconds per step
#   big         512^3 particles on 2 and 4 GPUs (those of RANKS), 4 steps
# usage: [RANKS="1 2 4"] [STEPS=30] validation/scaling/slabs.sh BIN OUT [invariance] [scaling] [big]
# (BIN built with --features cuda,mpi; OUT a scratch directory; a summary in OUT/summary.txt)
set -euo pipefail
BIN=$(realpath "$1")
OUT=$2
shift 2
PARTS=${*:-invariance scaling}
STEPS=${STEPS:-30}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# GPUs: those CUDA_VISIBLE_DEVICES names, else every one nvidia-smi lists
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    G=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
else
    G=$(nvidia-smi -L | wc -l)
fi
CORES=$(nproc)
log() { echo "$*" | tee -a "$OUT/summary.txt"; }
mpi() {
    local r=$1
    shift
    mpirun --oversubscribe --bind-to none -np "$r" "$BIN" "$@" --threads $((CORES / r))
}
ranks() { for r in ${RANKS:-1 2 4}; do [ "$r" -le "$G" ] && echo "$r"; done; }

compare() { # compare.py-free check of diagnostics.csv rows against the first directory
    python3 - "$@" <<'PY' | tee -a "$OUT/summary.txt"
import csv, sys
def rows(d):
    with open(f"{d}/diagnostics.csv") as f:
        return {int(float(r["step"])): (float(r["energy"]), float(r["enstrophy"])) for r in csv.DictReader(f)}
base = rows(sys.argv[1])
ok = True
for d in sys.argv[2:]:
    r = rows(d)
    common = sorted(set(base) & set(r))
    de = max(abs(r[s][0] - base[s][0]) / abs(base[s][0]) for s in common)
    dz = max(abs(r[s][1] - base[s][1]) / abs(base[s][1]) for s in common)
    good = de <= 1e-6 and dz <= 1e-6 and len(common) == len(base)
    ok &= good
    print(f"  {d.split('/')[-1]:>14} vs {sys.argv[1].split('/')[-1]}: {len(common)} rows, max |dE|/E {de:.2e}, |dZ|/Z {dz:.2e} {'PASS' if good else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
}

mean_step() { # mean seconds per step and per phase (timing.csv rows after the first two steps)
    python3 - "$1/timing.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))[2:]
def mean(k):
    return sum(float(r[k]) for r in rows) / len(rows)
phases = [k for k in rows[0] if k not in ("step", "t", "s_step") and k.startswith("s_")]
detail = ", ".join(f"{k[2:]} {mean(k):.3f}" for k in phases if mean(k) >= 0.0005)
print(f"{mean('s_step'):.4f} s/step over {len(rows)} steps ({detail})")
PY
}

if [[ " $PARTS " == *" invariance "* ]]; then
    for case in vortex-isotropic-64 vortex-taylor-green-re1600-128; do
        cfg="$OUT/$case.toml"
        sed -e 's/^diagnostics_every = .*/diagnostics_every = 1/; s/^snapshot_every = .*/snapshot_every = 0/' \
            "$root/runs/$case.toml" > "$cfg"
        dirs=()
        for r in $(ranks); do
            rm -rf "$OUT/$case-r$r"
            mpi "$r" run "$cfg" --grid uniform --steps 20 --out "$OUT/$case-r$r" > "$OUT/$case-r$r.log" 2>&1
            dirs+=("$OUT/$case-r$r")
        done
        log "$case: 20 steps on R = $(ranks | tr '\n' ' ')"
        compare "${dirs[@]}" || true
        if [ "$G" -ge 4 ]; then
            rm -rf "$OUT/$case-restart"
            mpi 2 run "$cfg" --grid uniform --steps 10 --out "$OUT/$case-restart" > "$OUT/$case-restart.log" 2>&1
            mpi 4 run "$cfg" --grid uniform --steps 10 --out "$OUT/$case-restart" \
                --restart "$OUT/$case-restart/checkpoint.bin" >> "$OUT/$case-restart.log" 2>&1
            log "$case: 10 steps on 2 GPUs, restart on 4 for 10 more"
            compare "$OUT/$case-r1" "$OUT/$case-restart" || true
        fi
    done
fi

if [[ " $PARTS " == *" scaling "* ]]; then
    cfg="$root/runs/vortex-isotropic-256.toml"
    start="$OUT/iso256-start"
    if [ ! -s "$start/checkpoint.bin" ]; then
        rm -rf "$start"
        mpi 1 run "$cfg" --grid uniform --steps 0 --out "$start" > "$start.log" 2>&1
    fi
    for r in $(ranks); do
        d="$OUT/iso256-r$r"
        rm -rf "$d"
        cp -r "$start" "$d"
        mpi "$r" run "$cfg" --grid uniform --steps "$STEPS" --out "$d" --restart "$d" > "$d.log" 2>&1
        log "256^3 p = 10 on $r GPU(s): $(mean_step "$d")"
    done
fi

if [[ " $PARTS " == *" big "* ]]; then
    cfg="$OUT/vortex-isotropic-512.toml"
    sed -e 's/^n = 256/n = 512/; s/^grid = 128/grid = 256/; s/^checkpoint_every = .*/checkpoint_every = 0/' \
        "$root/runs/vortex-isotropic-256.toml" > "$cfg"
    for r in $(ranks); do
        [ "$r" -ge 2 ] || continue
        rm -rf "$OUT/iso512-r$r"
        mpi "$r" run "$cfg" --grid uniform --steps 4 --out "$OUT/iso512-r$r" > "$OUT/iso512-r$r.log" 2>&1
        log "512^3 p = 10 on $r GPUs: $(mean_step "$OUT/iso512-r$r")"
    done
fi

#!/usr/bin/env bash
# A sweep of vortex-method runs over one configuration key (seeds, Reynolds numbers through the
# viscosity, ...) as one Slurm job array, one output directory per value, and the table of
# their last diagnostics rows once every run has ended.
# Usage (from the repository root):
#   slurm/sweep.sh CONFIG.toml SWEEPDIR KEY VALUE... [-- SBATCH_OPTIONS...]
#   e.g. slurm/sweep.sh runs/vortex-isotropic-64.toml runs/out/seeds initial.seed 1 2 3 4
#        slurm/sweep.sh runs/vortex-isotropic-64.toml runs/out/re nu 0.02 0.01 0.005
# KEY is `key` (top level) or `section.key`. Writes SWEEPDIR/configs/KEY=VALUE.toml (the
# configuration with the key set), submits slurm/sweep.sbatch as an array (task i runs the i-th
# configuration into SWEEPDIR/KEY=VALUE, continuing over time limits like run.sbatch), and a job
# that runs after every task has ended (afterany) and writes SWEEPDIR/table.csv
# (slurm/sweep_table.py: per run its value, state, steps, t and the last row's energy and
# enstrophy). `vortex status SWEEPDIR` shows where each run stands meanwhile. Prints the two job
# ids. SBATCH_OPTIONS go to both submissions (partition, account, time, cpus ...).
set -euo pipefail
config=${1:?configuration file}
sweep=${2:?sweep directory}
key=${3:?configuration key}
shift 3
values=()
while [[ $# -gt 0 && $1 != -- ]]; do
    values+=("$1")
    shift
done
[[ ${1:-} == -- ]] && shift
opts=("$@")
[[ ${#values[@]} -gt 0 ]] || { echo "slurm/sweep.sh: no values for $key" >&2; exit 1; }
[[ -f $config ]] || { echo "slurm/sweep.sh: $config: no such file" >&2; exit 1; }
if [[ -e $sweep && -n $(ls -A "$sweep" 2>/dev/null) ]]; then
    echo "slurm/sweep.sh: $sweep is not empty: choose a new sweep directory" >&2
    exit 1
fi
mkdir -p "$sweep/configs"
: > "$sweep/runs.txt"
for v in "${values[@]}"; do
    name="$key=$v"
    python3 slurm/sweep_table.py --set "$config" "$key" "$v" > "$sweep/configs/$name.toml"
    echo "$name" >> "$sweep/runs.txt"
done
n=${#values[@]}
array=$(sbatch --parsable --array="0-$((n - 1))" --output="$sweep/%x-%A_%a.out" "${opts[@]}" \
    slurm/sweep.sbatch "$sweep")
array=${array%%;*}
table=$(sbatch --parsable --dependency="afterany:$array" --job-name=vortex-sweep-table \
    --ntasks=1 --cpus-per-task=1 --time=10 --output="$sweep/table-%j.out" "${opts[@]}" \
    --wrap "python3 slurm/sweep_table.py '$sweep'")
echo "sweep of $n runs over $key: array job $array, table job $table (writes $sweep/table.csv)"
echo "$array $table"
